// A benchmark split's windows read on demand (a data set larger than host
// memory streams; docs/data.md, "Benchmark formats"): a batch's windows by
// index, in any order, read by hyperslab. The windows of one trajectory whose
// steps overlap share one read (a window of `history` input steps and
// `horizon` target steps starting at s spans steps [s, s + history + horizon)),
// so a batch of neighbouring windows reads each step once, not `history` times.
// The values are those of BenchmarkSet::windows.
#pragma once

#include <fno_data/benchmark.h>

#include <torch/types.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace fno::data {

/// The shapes of `n` windows of `set`: x [n, C_in, *S], y [n, C_out, *S]
/// (S: set.read_grid()).
std::pair<std::vector<int64_t>, std::vector<int64_t>> window_shapes(const BenchmarkSet& set,
                                                                    int64_t n);

/// Windows `indices` (each in [0, set.n_windows())) into x [n, C_in, *S] and
/// y [n, C_out, *S] (float32, contiguous, e.g. pinned host memory; n =
/// indices.size()): row i is window indices[i].
void read_windows_into(const BenchmarkSet& set, const std::vector<int64_t>& indices,
                       torch::Tensor& x, torch::Tensor& y);

/// The same into new tensors.
// -> x: [n, history * F + F_const, *S], y: [n, horizon * F_out, *S]
FieldPairs read_windows(const BenchmarkSet& set, const std::vector<int64_t>& indices);

/// data.normalization pointwise over every window of the split: the mean and
/// the unbiased std per channel and grid point, [1, C, *S] each, of the inputs
/// and of the targets.
struct WindowStats {
  torch::Tensor x_mean, x_std, y_mean, y_std;
};

/// WindowStats by one pass over the windows in order, `chunk` at a time,
/// accumulated in float64 (each chunk's mean and squared deviations, merged
/// by Chan's pairwise update).
WindowStats pointwise_window_stats(const BenchmarkSet& set, int64_t chunk);

}  // namespace fno::data
