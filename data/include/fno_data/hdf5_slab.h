// Parts of an HDF5 array without reading the rest: samples [s0, s1) x rows
// [r0, r1) of the first spatial dim, in the layouts the loaders read (grid,
// channels first or last; MATLAB v7.3's reversed dims), as [b, C, rows, *S']
// float32. For prediction on grids past the host's memory (one tile of rows at
// a time), for several processes that each read their rows, and for
// benchmark data.
#pragma once

#include <fno_data/darcy.h>

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fno::data {

class Hdf5SlabReader {
 public:
  /// Opens array `key` of the HDF5 (or .mat v7.3) file `path`, read as
  /// `layout`; checks it as the loaders do (numeric, rank, a non-empty grid).
  /// HDF5's chunk cache for it holds one band of chunks across the array
  /// (at most `max_cache_bytes`), so that reading a tile of rows after
  /// another decompresses each chunk once. Errors: std::runtime_error, one
  /// line that starts with the file name.
  Hdf5SlabReader(const std::string& path, const std::string& key, Layout layout = Layout::kGrid,
                 int64_t max_cache_bytes = int64_t{256} << 20);
  ~Hdf5SlabReader();
  /// Opens array `key` as stored, of any rank >= 1 (the benchmark readers,
  /// fno_data/benchmark.h): shape() is the stored shape, read_box() reads.
  struct AnyRank {};
  Hdf5SlabReader(const std::string& path, const std::string& key, AnyRank,
                 int64_t max_cache_bytes = int64_t{64} << 20);
  Hdf5SlabReader(const Hdf5SlabReader&) = delete;
  Hdf5SlabReader& operator=(const Hdf5SlabReader&) = delete;

  /// The whole array as the loaders give it: [N, C, *S].
  const std::vector<int64_t>& shape() const;
  /// Samples [s0, s1), rows [r0, r1) of the first spatial dim:
  /// [s1 - s0, C, r1 - r0, *S'] float32, contiguous, on the CPU. Values
  /// that are not finite are an error naming the sample.
  torch::Tensor read(int64_t s0, int64_t s1, int64_t r0, int64_t r1) const;
  /// Any reader: the hyperslab start/count/stride over the stored dims (of
  /// AnyRank's shape(); for the others, the file's dims), float32 in stored
  /// order, contiguous, on the CPU. Values that are not finite are an error.
  torch::Tensor read_box(const std::vector<int64_t>& start, const std::vector<int64_t>& count,
                         const std::vector<int64_t>& stride = {}) const;
  const std::string& key() const;
  /// The bytes HDF5 may cache for this array (a host memory budget counts them).
  int64_t cache_bytes() const;
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

}  // namespace fno::data
