// The Well's layout (PolymathicAI/the_well, WellDataset): one file per shard
// and split, data/<split>/*.h5|*.hdf5; root attribute n_trajectories;
// dimensions/{time, <spatial_dims>} with attribute spatial_dims;
// t0_fields/, t1_fields/, t2_fields/ with attribute field_names, each field
// (B, T, *S[, D[, D]]) less the axes its attributes sample_varying,
// time_varying and dim_varying drop. docs/data.md, "Benchmark formats".
#include <torch/torch.h>

#include "benchmark_internal.h"
#include "h5_meta.h"

namespace fno::data::bench {

std::vector<std::string> well_files(const std::string& path, const std::string& split) {
  if (!is_directory(path)) return {path};
  for (const auto& dir : {path + "/data/" + split, path + "/" + split}) {
    if (is_directory(dir)) {
      auto files = list_h5_files(dir);
      if (files.empty())
        throw std::runtime_error(dir + ": no .h5 or .hdf5 files (split '" + split + "')");
      return files;
    }
  }
  auto files = list_h5_files(path);
  if (files.empty()) {
    throw std::runtime_error(path + ": no split '" + split + "' (no folder data/" + split +
                             "/ or " + split + "/, and no .h5 or .hdf5 files in it)");
  }
  return files;
}

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

// One field of one file: its array checked against the file's dims.
std::shared_ptr<FieldArray> open_field(const h5::MetaFile& f, const std::string& key, int order,
                                       int64_t n_traj, int64_t n_steps,
                                       const std::vector<std::string>& dims,
                                       const std::vector<int64_t>& grid, bool* time_varying) {
  const auto flag = [&](const char* name) { return f.number(key, name) != 0; };
  const bool sample = flag("sample_varying");
  *time_varying = flag("time_varying");
  std::vector<double> dv = f.numbers(key, "dim_varying");
  if (dv.size() != dims.size()) {
    f.fail("attribute 'dim_varying' of '" + key + "' holds " + std::to_string(dv.size()) +
           " values for " + std::to_string(dims.size()) + " spatial dims");
  }
  auto a = std::make_shared<FieldArray>();
  std::vector<int64_t> want;
  std::string names;
  if (sample) {
    a->axes.push_back(Axis::kSample);
    want.push_back(n_traj);
    names += "B, ";
  }
  if (*time_varying) {
    a->axes.push_back(Axis::kTime);
    want.push_back(n_steps);
    names += "T, ";
  }
  for (size_t d = 0; d < dims.size(); ++d) {
    a->space_varying.push_back(dv[d] != 0);
    if (dv[d] == 0) continue;
    a->axes.push_back(Axis::kSpace);
    want.push_back(grid[d]);
    names += dims[d] + ", ";
  }
  for (int i = 0; i < order; ++i) {
    a->axes.push_back(Axis::kComponent);
    want.push_back(static_cast<int64_t>(dims.size()));
    names += "D, ";
  }
  if (names.size() >= 2) names.resize(names.size() - 2);
  const auto shape = f.shape(key);
  if (shape != want) {
    f.fail("dataset '" + key + "' has shape " + shape_text(shape) + ", expected " +
           shape_text(want) + " (" + names + ") from its attributes and the file's dimensions");
  }
  a->reader = std::make_shared<Hdf5SlabReader>(f.path(), key, Hdf5SlabReader::AnyRank{});
  return a;
}

// The channel names of a field of tensor order `order`: name_x, name_xy, ...
std::vector<std::string> channel_names(const std::string& name, int order,
                                       const std::vector<std::string>& dims) {
  std::vector<std::string> out{""};
  for (int i = 0; i < order; ++i) {
    std::vector<std::string> next;
    for (const auto& s : out)
      for (const auto& d : dims) next.push_back(s + d);
    out = next;
  }
  for (auto& s : out) s = s.empty() ? name : name + "_" + s;
  return out;
}

}  // namespace

Catalog well_catalog(const std::string& path, const BenchmarkOptions& options,
                     const std::vector<std::string>& fields) {
  Catalog cat;
  cat.files = well_files(path, options.split());
  for (const auto& file : cat.files) {
    h5::MetaFile f(file);
    if (!f.is_group("dimensions")) f.fail("no group 'dimensions' (not The Well's layout)");
    const auto dims = f.strings("dimensions", "spatial_dims");
    if (dims.empty() || dims.size() > 3)
      f.fail("'dimensions' names " + std::to_string(dims.size()) +
             " spatial dims, expected 1 to 3");
    std::vector<int64_t> grid;
    for (const auto& d : dims) {
      if (!f.is_dataset("dimensions/" + d)) f.fail("no dataset 'dimensions/" + d + "'");
      grid.push_back(f.shape("dimensions/" + d).back());
    }
    if (!f.is_dataset("dimensions/time")) f.fail("no dataset 'dimensions/time'");
    const int64_t steps = f.shape("dimensions/time").back();
    const auto n_traj = static_cast<int64_t>(f.number("/", "n_trajectories"));
    if (cat.grid.empty()) {
      cat.grid = grid;
    } else if (grid != cat.grid) {
      f.fail("grid " + shape_text(grid) + " differs from " + shape_text(cat.grid) + " of " +
             cat.files.front());
    }
    Unit unit;
    unit.file = file;
    unit.n_samples = n_traj;
    unit.n_steps = steps;
    size_t k = 0;
    for (int order = 0; order < 3; ++order) {
      const std::string group = "t" + std::to_string(order) + "_fields";
      if (!f.is_group(group)) continue;
      for (const auto& name : f.strings(group, "field_names")) {
        const std::string key = group + "/" + name;
        if (!f.is_dataset(key))
          f.fail("'" + group + "' lists field '" + name + "', but there is no dataset '" + key +
                 "'");
        bool time_varying = true;
        std::shared_ptr<FieldArray> a;
        if (wanted(fields, name))
          a = open_field(f, key, order, n_traj, steps, dims, grid, &time_varying);
        else
          time_varying = f.number(key, "time_varying") != 0;
        if (&file == &cat.files.front()) {
          cat.fields.push_back({name, time_varying, channel_names(name, order, dims)});
        } else if (k >= cat.fields.size() || cat.fields[k].name != name) {
          f.fail("its fields differ from those of " + cat.files.front());
        }
        unit.arrays.push_back(a);
        ++k;
      }
    }
    if (k != cat.fields.size()) f.fail("its fields differ from those of " + cat.files.front());
    for (int64_t s = 0; s < n_traj; ++s) cat.trajectories.emplace_back(cat.units.size(), s);
    cat.units.push_back(std::move(unit));
  }
  return cat;
}

}  // namespace fno::data::bench
