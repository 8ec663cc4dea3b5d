// PDEArena's layout (pdearena/pdearena, data/twod/datapipes): files whose
// names hold the split ("train", "valid", "test"), each with a group of that
// name holding 'u' (N, T, X, Y), 'vx' and 'vy' (the velocity), optionally
// 'buo_y' (N,) (the buoyancy a conditioned model takes; not a field, a scalar
// that data.scalars may choose), and the coordinates 'x', 'y', 't'. Its
// channels: u, then vx, vy.
// docs/data.md, "Benchmark formats".
#include <torch/torch.h>

#include <algorithm>

#include "benchmark_internal.h"
#include "h5_meta.h"

namespace fno::data::bench {

std::vector<std::string> pdearena_files(const std::string& path, const std::string& split) {
  auto files = is_directory(path) ? list_h5_files(path, split) : std::vector<std::string>{path};
  if (files.empty()) {
    throw std::runtime_error(path + ": no split '" + split + "' (no .h5 file whose name holds '" +
                             split + "')");
  }
  return files;
}

Catalog pdearena_catalog(const std::string& path, const BenchmarkOptions& options,
                         const std::vector<std::string>& fields) {
  const std::string& split = options.split();
  Catalog cat;
  cat.files = pdearena_files(path, split);
  std::vector<int64_t> ref;
  for (const auto& file : cat.files) {
    h5::MetaFile f(file);
    if (!f.is_group(split)) {
      f.fail("no split '" + split + "' (no group '" + split + "'; found: " + join(f.members("/")) +
             ")");
    }
    std::vector<std::string> order;
    const auto members = f.members(split);
    for (const char* k : {"u", "vx", "vy"}) {
      if (std::find(members.begin(), members.end(), k) != members.end()) order.push_back(k);
    }
    for (const auto& k : members) {
      if (std::find(order.begin(), order.end(), k) != order.end()) continue;
      if (f.is_dataset(split + "/" + k) && f.shape(split + "/" + k).size() == 4) order.push_back(k);
    }
    if (order.empty())
      f.fail("group '" + split + "' holds no field (found: " + join(members) + ")");
    Unit unit;
    unit.file = file;
    size_t k = 0;
    for (const auto& name : order) {
      const std::string key = split + "/" + name;
      const auto shape = f.shape(key);
      if (shape.size() != 4) {
        f.fail("dataset '" + key + "' has rank " + std::to_string(shape.size()) +
               ", expected 4 (N, T, X, Y)");
      }
      if (ref.empty()) {
        ref = shape;
        cat.grid.assign(shape.begin() + 2, shape.end());
      }
      if (std::vector<int64_t>(shape.begin() + 1, shape.end()) !=
              std::vector<int64_t>(ref.begin() + 1, ref.end()) ||
          (k > 0 && shape[0] != unit.n_samples)) {
        f.fail("dataset '" + key + "' has a shape unlike the other fields'");
      }
      unit.n_samples = shape[0];
      unit.n_steps = shape[1];
      if (&file == &cat.files.front()) {
        cat.fields.push_back({name, true, {name}});
      } else if (k >= cat.fields.size() || cat.fields[k].name != name) {
        f.fail("its fields differ from those of " + cat.files.front());
      }
      std::shared_ptr<FieldArray> a;
      if (wanted(fields, name)) {
        a = std::make_shared<FieldArray>();
        a->axes = {Axis::kSample, Axis::kTime, Axis::kSpace, Axis::kSpace};
        a->space_varying = {true, true};
        a->reader = std::make_shared<Hdf5SlabReader>(file, key, Hdf5SlabReader::AnyRank{});
      }
      unit.arrays.push_back(a);
      ++k;
    }
    // Scalars: the group's arrays of one value per sample (buo_y).
    for (const auto& name : options.scalars()) {
      const std::string key = split + "/" + name;
      if (!f.is_dataset(key) || f.shape(key) != std::vector<int64_t>{unit.n_samples}) {
        std::vector<std::string> found;
        for (const auto& m : members) {
          if (f.is_dataset(split + "/" + m) &&
              f.shape(split + "/" + m) == std::vector<int64_t>{unit.n_samples})
            found.push_back(m);
        }
        f.fail("data.scalars: no scalar '" + name + "' in group '" + split +
               "' (an array of one value per sample; found: " + join(found) + ")");
      }
      const auto v = f.values(key);
      unit.scalars.emplace_back(v.begin(), v.end());
    }
    for (int64_t s = 0; s < unit.n_samples; ++s) cat.trajectories.emplace_back(cat.units.size(), s);
    cat.units.push_back(std::move(unit));
  }
  return cat;
}

}  // namespace fno::data::bench
