// PDEBench's layouts (pdebench/PDEBench, pdebench/models/fno/utils.py):
// - one file of arrays (FNODatasetSingle): 'tensor' (N, T, *S) for the scalar
//   equations, or 'density', 'pressure', 'Vx', 'Vy'[, 'Vz'] (N, T, *S) for
//   CFD, beside 'x-coordinate', ...; its split: the first int(0.1 N) samples
//   test, the rest train;
// - one group per sample (FNODatasetMult): '0000'/data (T, *S, V) with
//   '0000'/grid/{x, y, t}; its split: the first int(0.9 n) sorted groups
//   train, the rest test.
// docs/data.md, "Benchmark formats".
#include <torch/torch.h>

#include <algorithm>

#include "benchmark_internal.h"
#include "h5_meta.h"

namespace fno::data::bench {

namespace {

constexpr double kTestRatio = 0.1;  // PDEBench's test_ratio

void check_split(const h5::MetaFile& f, const std::string& split) {
  if (split != "train" && split != "test") {
    f.fail("no split '" + split +
           "': PDEBench's files split into train and test (its test_ratio 0.1)");
  }
}

// The sample groups, each holding 'data' (FNODatasetMult's files).
Catalog mult_catalog(const h5::MetaFile& f, const std::vector<std::string>& keys,
                     const BenchmarkOptions& options, const std::vector<std::string>& fields) {
  Catalog cat;
  cat.files = {f.path()};
  const auto test_idx = static_cast<size_t>(static_cast<double>(keys.size()) * (1 - kTestRatio));
  const bool train = options.split() == "train";
  const std::vector<std::string> names(
      train ? keys.begin() : keys.begin() + static_cast<long>(test_idx),
      train ? keys.begin() + static_cast<long>(test_idx) : keys.end());
  std::vector<int64_t> first;
  for (const auto& g : names) {
    const std::string key = g + "/data";
    const auto shape = f.shape(key);
    if (shape.size() < 3 || shape.size() > 5) {
      f.fail("dataset '" + key + "' has rank " + std::to_string(shape.size()) +
             ", expected 3 to 5 (T, *S, V)");
    }
    if (first.empty()) {
      first = shape;
      cat.grid.assign(shape.begin() + 1, shape.end() - 1);
      std::vector<std::string> channels;
      for (int64_t v = 0; v < shape.back(); ++v) channels.push_back("data_" + std::to_string(v));
      cat.fields.push_back({"data", true, channels});
    } else if (std::vector<int64_t>(shape.begin() + 1, shape.end()) !=
               std::vector<int64_t>(first.begin() + 1, first.end())) {
      f.fail("dataset '" + key + "' has shape " + shape_text(shape) + ", unlike " +
             shape_text(first) + " of '" + names.front() + "/data'");
    }
    Unit unit;
    unit.file = f.path();
    unit.where = g;
    unit.n_samples = 1;
    unit.n_steps = shape[0];
    std::shared_ptr<FieldArray> a;
    if (wanted(fields, "data")) {
      a = std::make_shared<FieldArray>();
      a->axes.push_back(Axis::kTime);
      for (size_t d = 0; d < cat.grid.size(); ++d) a->axes.push_back(Axis::kSpace);
      a->axes.push_back(Axis::kComponent);
      a->space_varying.assign(cat.grid.size(), true);
      a->reader = std::make_shared<Hdf5SlabReader>(f.path(), key, Hdf5SlabReader::AnyRank{});
    }
    unit.arrays.push_back(a);
    cat.trajectories.emplace_back(cat.units.size(), 0);
    cat.units.push_back(std::move(unit));
  }
  return cat;
}

}  // namespace

Catalog pdebench_catalog(const std::string& path, const BenchmarkOptions& options,
                         const std::vector<std::string>& fields) {
  if (is_directory(path)) {
    throw std::runtime_error(path + ": a folder; PDEBench's data sets are one file each");
  }
  h5::MetaFile f(path);
  check_split(f, options.split());
  if (!options.scalars().empty()) {
    f.fail("data.scalars: PDEBench's files hold no scalars (got '" + options.scalars().front() +
           "')");
  }
  const auto keys = f.members("/");
  std::vector<std::string> groups, arrays;
  for (const auto& k : keys) {
    if (f.is_group(k))
      groups.push_back(k);
    else if (f.is_dataset(k))
      arrays.push_back(k);
  }
  if (!groups.empty() && arrays.empty()) {
    for (const auto& g : groups) {
      if (!f.is_dataset(g + "/data"))
        f.fail("group '" + g + "' holds no dataset 'data' (PDEBench's per-sample layout)");
    }
    return mult_catalog(f, groups, options, fields);
  }
  // One file of arrays: the fields in PDEBench's channel order, then the rest.
  std::vector<std::string> order;
  for (const char* k : {"tensor", "density", "pressure", "Vx", "Vy", "Vz"}) {
    if (std::find(arrays.begin(), arrays.end(), k) != arrays.end()) order.push_back(k);
  }
  for (const auto& k : arrays) {
    const bool coordinate = k.size() > 11 && k.compare(k.size() - 11, 11, "-coordinate") == 0;
    if (!coordinate && std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
  }
  if (order.empty()) f.fail("no arrays (found: " + join(keys) + ")");
  Catalog cat;
  cat.files = {path};
  // The time-varying arrays are (N, T, *S); the grid's rank is the first one's.
  const auto ref = f.shape(order.front());
  if (ref.size() < 3 || ref.size() > 5) {
    f.fail("dataset '" + order.front() + "' has rank " + std::to_string(ref.size()) +
           ", expected 3 to 5 (N, T, *S)");
  }
  cat.grid.assign(ref.begin() + 2, ref.end());
  Unit unit;
  unit.file = path;
  unit.n_samples = ref[0];
  unit.n_steps = ref[1];
  for (const auto& k : order) {
    const auto shape = f.shape(k);
    // (N, T, *S) or, constant in time (as Darcy's 'nu'), (N, *S).
    const bool time_varying = shape.size() == ref.size();
    std::vector<int64_t> want{ref[0]};
    if (time_varying) want.push_back(ref[1]);
    want.insert(want.end(), cat.grid.begin(), cat.grid.end());
    if (shape != want) {
      // A chosen field, or any array of a grid's rank, must match; others
      // (per-sample parameters) are no fields.
      if ((!fields.empty() && wanted(fields, k)) || (fields.empty() && shape.size() >= 3)) {
        f.fail("dataset '" + k + "' has shape " + shape_text(shape) + ", expected " +
               shape_text(ref) + " (N, T, *S) or (N, *S) as '" + order.front() + "'");
      }
      continue;
    }
    cat.fields.push_back({k, time_varying, {k}});
    std::shared_ptr<FieldArray> a;
    if (wanted(fields, k)) {
      a = std::make_shared<FieldArray>();
      a->axes.push_back(Axis::kSample);
      if (time_varying) a->axes.push_back(Axis::kTime);
      for (size_t d = 0; d < cat.grid.size(); ++d) a->axes.push_back(Axis::kSpace);
      a->space_varying.assign(cat.grid.size(), true);
      a->reader = std::make_shared<Hdf5SlabReader>(path, k, Hdf5SlabReader::AnyRank{});
    }
    unit.arrays.push_back(a);
  }
  const auto test_idx = static_cast<int64_t>(static_cast<double>(unit.n_samples) * kTestRatio);
  const bool train = options.split() == "train";
  for (int64_t s = train ? test_idx : 0; s < (train ? unit.n_samples : test_idx); ++s) {
    cat.trajectories.emplace_back(0, s);
  }
  cat.units.push_back(std::move(unit));
  return cat;
}

}  // namespace fno::data::bench
