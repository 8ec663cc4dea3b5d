// Internal to data/: what each benchmark layout (well.cpp, pdebench.cpp,
// pdearena.cpp) finds in its files, in one form that BenchmarkSet
// (benchmark.cpp) reads windows from.
#pragma once

#include <fno_data/benchmark.h>
#include <fno_data/hdf5_slab.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fno::data::bench {

/// How one stored dim of an array reads.
enum class Axis { kSample, kTime, kSpace, kComponent };

/// One field's array in one unit (a file, or a PDEBench sample group).
struct FieldArray {
  std::shared_ptr<Hdf5SlabReader> reader;
  /// Per stored dim: its role; kSpace dims in the grid's order.
  std::vector<Axis> axes;
  /// Per grid dim: whether the array varies along it (The Well's
  /// dim_varying; a dim it does not vary along is not stored, and broadcast).
  std::vector<bool> space_varying;
};

/// A field as the layout names it.
struct FieldInfo {
  std::string name;
  bool time_varying = true;
  /// Its channels' names ("velocity_x", "velocity_y" for a vector field).
  std::vector<std::string> channels;
};

/// The arrays of one unit, one per field of Catalog::fields (null where a
/// unit lacks the field: an error when it is chosen).
struct Unit {
  std::string file;
  std::string where;  // "" or the sample group ("0003")
  int64_t n_samples = 0;
  int64_t n_steps = 0;
  std::vector<std::shared_ptr<FieldArray>> arrays;
};

struct Catalog {
  std::vector<FieldInfo> fields;
  std::vector<Unit> units;
  std::vector<int64_t> grid;  // before subsampling
  std::vector<std::string> files;
  /// The split's trajectories: (unit, sample in it).
  std::vector<std::pair<size_t, int64_t>> trajectories;
};

/// The catalogs of the three layouts; `fields` (all of options.fields and
/// options.target_fields) names the fields to open, {} all of them.
Catalog well_catalog(const std::string& path, const BenchmarkOptions& options,
                     const std::vector<std::string>& fields);
Catalog pdebench_catalog(const std::string& path, const BenchmarkOptions& options,
                         const std::vector<std::string>& fields);
Catalog pdearena_catalog(const std::string& path, const BenchmarkOptions& options,
                         const std::vector<std::string>& fields);

/// The files of a split: The Well's (data/<split>/, <split>/, the folder's, or
/// the file), PDEArena's (those whose names hold the split, or the file).
std::vector<std::string> well_files(const std::string& path, const std::string& split);
std::vector<std::string> pdearena_files(const std::string& path, const std::string& split);

/// The .h5 and .hdf5 files in a folder, sorted; those whose name holds
/// `contains` ("" all).
std::vector<std::string> list_h5_files(const std::string& dir, const std::string& contains = "");
bool is_directory(const std::string& path);
/// "a, b, c" for messages.
std::string join(const std::vector<std::string>& names);
/// Whether `name` is wanted: `wanted` empty or holding it.
bool wanted(const std::vector<std::string>& wanted_fields, const std::string& name);

}  // namespace fno::data::bench
