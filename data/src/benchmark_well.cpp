// The Well's layout (PolymathicAI/the_well, WellDataset): one file per shard
// and split, data/<split>/*.h5|*.hdf5; root attribute n_trajectories;
// dimensions/{time, <spatial_dims>} with attribute spatial_dims;
// t0_fields/, t1_fields/, t2_fields/ with attribute field_names, each field
// (B, T, *S[, D[, D]]) less the axes its attributes sample_varying,
// time_varying and dim_varying drop; scalars/ with attribute field_names, each
// (B?, T?) as its sample_varying and time_varying say; boundary_conditions/,
// a group per condition (bc_type, associated_dims, a mask over those dims);
// stats.yaml beside data/. docs/data.md, "Benchmark formats".
#include <torch/torch.h>

#include <algorithm>
#include <cctype>

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

// The chosen scalars of a file (data.scalars), each's value per sample (one
// value when it does not vary over samples).
std::vector<std::vector<float>> read_scalars(const h5::MetaFile& f,
                                             const std::vector<std::string>& chosen,
                                             int64_t n_traj) {
  std::vector<std::vector<float>> out;
  if (chosen.empty()) return out;
  const auto names =
      f.is_group("scalars") ? f.strings("scalars", "field_names") : std::vector<std::string>{};
  for (const auto& name : chosen) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      f.fail("data.scalars: no scalar '" + name + "' (found: " + join(names) + ")");
    }
    const std::string key = "scalars/" + name;
    if (!f.is_dataset(key))
      f.fail("'scalars' lists '" + name + "', but there is no dataset '" + key + "'");
    if (f.number(key, "time_varying") != 0) {
      f.fail("data.scalars: scalar '" + name +
             "' varies in time (time_varying true); only scalars constant in time are inputs");
    }
    const bool per_sample = f.number(key, "sample_varying") != 0;
    const auto v = f.values(key);
    const auto want = static_cast<size_t>(per_sample ? n_traj : 1);
    if (v.size() != want) {
      f.fail("dataset '" + key + "' holds " + std::to_string(v.size()) + " values, expected " +
             std::to_string(want) +
             (per_sample ? " (one per trajectory)" : " (sample_varying false)"));
    }
    out.emplace_back(v.begin(), v.end());
  }
  return out;
}

// Per spatial dim, the ends' conditions as the_well's WellDataset._padding_bcs
// reads them: open unless a group names the dim; its bc_type where its mask
// holds at that end (WALL: over all of it; OPEN, PERIODIC: anywhere).
std::vector<DimBoundary> read_boundaries(const h5::MetaFile& f,
                                         const std::vector<std::string>& dims) {
  if (!f.is_group("boundary_conditions")) return {};
  std::vector<DimBoundary> out;
  for (const auto& d : dims) out.push_back({d, BoundaryKind::kOpen, BoundaryKind::kOpen});
  for (const auto& g : f.members("boundary_conditions")) {
    const std::string key = "boundary_conditions/" + g;
    if (!f.is_group(key)) continue;
    const auto types = f.strings(key, "bc_type");
    std::string type = types.size() == 1 ? types[0] : std::string();
    for (auto& c : type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    BoundaryKind kind = BoundaryKind::kOpen;
    if (type == "WALL") {
      kind = BoundaryKind::kWall;
    } else if (type == "PERIODIC") {
      kind = BoundaryKind::kPeriodic;
    } else if (type != "OPEN") {
      f.fail("'" + key + "': bc_type '" + join(types) + "' is none of WALL, OPEN, PERIODIC");
    }
    const auto assoc = f.strings(key, "associated_dims");
    if (!f.is_dataset(key + "/mask")) f.fail("'" + key + "' holds no dataset 'mask'");
    const auto shape = f.shape(key + "/mask");
    const auto mask = f.values(key + "/mask");
    if (shape.size() != assoc.size()) {
      f.fail("dataset '" + key + "/mask' has rank " + std::to_string(shape.size()) + " for " +
             std::to_string(assoc.size()) + " associated dims");
    }
    for (size_t k = 0; k < assoc.size(); ++k) {
      const auto it = std::find(dims.begin(), dims.end(), assoc[k]);
      if (it == dims.end()) {
        f.fail("'" + key + "': associated dim '" + assoc[k] + "' is none of the spatial dims (" +
               join(dims) + ")");
      }
      // The mask's entries at index 0 and at the last index along axis k.
      int64_t inner = 1;
      for (size_t j = k + 1; j < shape.size(); ++j) inner *= shape[j];
      const int64_t len = shape[k];
      for (const bool last : {false, true}) {
        bool any = false, all = true;
        for (size_t i = 0; i < mask.size(); ++i) {
          const int64_t at = (static_cast<int64_t>(i) / inner) % len;
          if (at != (last ? len - 1 : 0)) continue;
          any = any || mask[i] != 0;
          all = all && mask[i] != 0;
        }
        if (len > 0 && (kind == BoundaryKind::kWall ? all : any)) {
          auto& b = out[static_cast<size_t>(it - dims.begin())];
          (last ? b.high : b.low) = kind;
        }
      }
    }
  }
  return out;
}

std::string folder_of(const std::string& file) {
  const auto slash = file.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : file.substr(0, slash);
}

}  // namespace

std::vector<DimBoundary> well_boundaries(const std::string& file) {
  h5::MetaFile f(file);
  return read_boundaries(f, f.strings("dimensions", "spatial_dims"));
}

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
    unit.scalars = read_scalars(f, options.scalars(), n_traj);
    if (&file == &cat.files.front()) {
      cat.stats_file = find_stats_file(folder_of(file), &cat.stats_searched);
    }
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
