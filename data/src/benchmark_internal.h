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
  /// Per chosen scalar (options.scalars), its value per sample (one value
  /// when it does not vary over samples).
  std::vector<std::vector<float>> scalars;
};

struct Catalog {
  std::vector<FieldInfo> fields;
  std::vector<Unit> units;
  std::vector<int64_t> grid;  // before subsampling
  std::vector<std::string> files;
  /// The split's trajectories: (unit, sample in it).
  std::vector<std::pair<size_t, int64_t>> trajectories;
  /// The benchmark's statistics file ("" none), and where it was looked for.
  std::string stats_file;
  std::vector<std::string> stats_searched;
};

/// The Well's stats.yaml: the first of `dir`, its parent and grandparent that
/// holds one; the folders looked in go to `searched`.
std::string find_stats_file(const std::string& dir, std::vector<std::string>* searched);

/// Per channel of the fields `fields` ([name, its channels]), mean and std
/// from stats.yaml `file` (The Well's layout: mean: {field: value or list},
/// std: likewise); std clipped below at `min_std`. Throws naming the file and
/// the field.
std::pair<std::vector<double>, std::vector<double>> read_stats(
    const std::string& file,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& fields, double min_std);

/// The catalogs of the three layouts; `fields` (all of options.fields and
/// options.target_fields) names the fields to open, {} all of them.
Catalog well_catalog(const std::string& path, const BenchmarkOptions& options,
                     const std::vector<std::string>& fields);
Catalog pdebench_catalog(const std::string& path, const BenchmarkOptions& options,
                         const std::vector<std::string>& fields);
Catalog pdearena_catalog(const std::string& path, const BenchmarkOptions& options,
                         const std::vector<std::string>& fields);

/// Per spatial dim, the boundary conditions a Well file declares ({} none).
std::vector<DimBoundary> well_boundaries(const std::string& file);

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
/// "(a, b, c)" (Python's tuple: "(a,)" for one) for messages.
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace fno::data::bench
