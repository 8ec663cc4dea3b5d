// Internal to predict(): the input files of a prediction, one or several,
// whose samples in the order given are one set of samples. HDF5 files are
// opened by their arrays' shapes alone (data::Hdf5SlabReader), so that they
// can be streamed tile by tile or read a range at a time; .pt files are read
// whole by the loaders. The files must agree on the arrays' channels and grid,
// and the truth (when asked for) on its samples and grid with the input.
#pragma once

#include <fno_data/darcy.h>
#include <fno_data/hdf5_slab.h>

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fno::detail {

class InputFiles {
 public:
  /// Opens `paths` in order: the input array lo.x_key() (and with `truth` the
  /// truth lo.y_key()); a name "" is each file's format's default (coeff and
  /// sol in HDF5, x and y in .pt). Throws std::runtime_error naming the file (and the
  /// first file) when an array is missing or the files disagree.
  InputFiles(std::vector<std::string> paths, const data::LoadOptions& lo, bool truth);
  ~InputFiles();
  InputFiles(const InputFiles&) = delete;
  InputFiles& operator=(const InputFiles&) = delete;

  /// The files, in order, and "a.h5" or "a.h5, b.h5, ..." (for messages).
  const std::vector<std::string>& paths() const { return paths_; }
  const std::string& text() const { return text_; }
  /// The first file's input array name.
  const std::string& x_key() const;
  /// The input's shape over every file, [N, Cin, *S]; the truth's, [N, Cout, *S].
  const std::vector<int64_t>& x_shape() const { return x_shape_; }
  const std::vector<int64_t>& y_shape() const { return y_shape_; }
  /// Whether every file is HDF5 (the stream reads their rows per tile).
  bool streamable() const;
  /// The bytes HDF5 may cache for the open arrays (a host budget counts them).
  int64_t cache_bytes(bool truth) const;

  /// Throws PredictUsageError naming the files when [first, first + count)
  /// (count -1: to the end) is not within the samples; returns its count.
  int64_t check_range(int64_t first, int64_t count) const;

  /// Samples [first, first + n) read whole (the truth undefined without it):
  /// x [n, Cin, *S], y [n, Cout, *S]. Each file is read by the loaders as far
  /// as the range needs.
  std::pair<torch::Tensor, torch::Tensor> load(int64_t first, int64_t n) const;
  /// Sample s's rows [r0, r1) of the input, or of the truth: [1, C, r1 - r0, *S']
  /// (an HDF5 file's by hyperslab, a .pt file's cut from the whole).
  torch::Tensor read_x(int64_t s, int64_t r0, int64_t r1) const;
  torch::Tensor read_y(int64_t s, int64_t r0, int64_t r1) const;
  /// Closes the arrays opened for streaming (when the data is read whole).
  void close();

 private:
  struct File;
  const File& file_of(int64_t& s) const;
  std::vector<std::string> paths_;
  std::string text_;
  bool truth_;
  std::vector<std::unique_ptr<File>> files_;
  std::vector<int64_t> x_shape_, y_shape_;
};

}  // namespace fno::detail
