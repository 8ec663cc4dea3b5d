// Internal to fno_bench's runner (bench.cpp): the rows of --domain-parallel N.
#pragma once

#include <fno_train/bench.h>
#include <fno_train/distributed.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fno {

/// Every precision x resolution x batch of `o` with each sample split over
/// o.domain_parallel ranks of `world` (every rank calls it); `log` sees each
/// row on every rank.
std::vector<BenchRow> run_domain_rows(const BenchOptions& o, std::shared_ptr<dist::Group> world,
                                      const std::function<void(const BenchRow&)>& log);

/// The median of the step times `v` (of an even count, the upper middle one),
/// as both kinds of rows report it.
double median_ms(std::vector<double> v);

}  // namespace fno
