// PDE data (Darcy flow, the 3D Poisson sets of fno_datagen): loaders for
// neuraloperator's .pt files and for HDF5 (.h5, MATLAB v7.3 .mat),
// normalization, and seeded batching.
//
// Every loader reads arrays of samples on a 2D grid (N, R1, R2) or a 3D grid
// (N, R1, R2, R3) and returns float32 CPU tensors x [N, 1, *S] (the input, e.g.
// the coefficient) and y [N, 1, *S] (the solution), validated: rank 3 or 4,
// matching shapes, numeric dtypes, finite values, at least one sample. With a
// channel layout (LoadOptions::x_layout, y_layout) an array holds C channels
// per sample, (N, C, *S) or (N, *S, C), read as [N, C, *S]. Errors are
// std::runtime_error with a one-line message that starts with the file name.
#pragma once

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fno::data {

/// Input/output function pairs: x [N, 1, *S], y [N, 1, *S], float32, contiguous, on the CPU.
struct FieldPairs {
  torch::Tensor x;
  torch::Tensor y;
};

/// How the dims of an array after its sample dim read. kGrid: all spatial,
/// (N, *S), one channel; kChannelsFirst: (N, C, *S); kChannelsLast: (N, *S, C),
/// e.g. records in time as channels. Either channel layout gives [N, C, *S].
enum class Layout { kGrid, kChannelsFirst, kChannelsLast };

/// "grid", "channels_first", "channels_last" (the config's names).
std::string to_string(Layout layout);

/// An array of shape (N, ...) in `layout` as [N, C, *S] (a view where it can be).
torch::Tensor to_channels(const torch::Tensor& array, Layout layout);

/// The ranks an array of `layout` may have, for messages:
/// "3 (N, R1, R2) or 4 (N, R1, R2, R3)", "4 (N, C, R1, R2) or 5 (N, C, R1, R2, R3)", ...
std::string layout_ranks(Layout layout);

struct LoadOptions {
  /// Keep the first n samples; -1 keeps all. Asking for more than the file holds keeps all, with a
  /// warning.
  TORCH_ARG(int64_t, n_samples) = -1;
  /// Keep every k-th grid point along each spatial dim (k >= 1).
  TORCH_ARG(int64_t, subsample) = 1;
  /// Name of the input array; "" means "x" for .pt files and "coeff" for HDF5.
  TORCH_ARG(std::string, x_key) = "";
  /// Name of the output array; "" means "y" for .pt files and "sol" for HDF5.
  TORCH_ARG(std::string, y_key) = "";
  /// The layout of the input and of the output array.
  TORCH_ARG(Layout, x_layout) = Layout::kGrid;
  TORCH_ARG(Layout, y_layout) = Layout::kGrid;
  /// What sets x_key and y_key where the loader is called from (e.g. "data.x_key"):
  /// a missing array's error then names it. "": not named.
  TORCH_ARG(std::string, x_key_setting) = "";
  TORCH_ARG(std::string, y_key_setting) = "";
};

enum class FileFormat { kTorchSave, kHdf5 };

/// The format of a data file, read from its first bytes (a zip archive is
/// torch.save; an HDF5 signature at offset 0, 512, 1024, ... is HDF5, which
/// covers MATLAB v7.3 .mat files). Throws naming the file when neither.
FileFormat detect_format(const std::string& path);

/// Loads a Darcy data file of either format.
FieldPairs load_darcy(const std::string& path, const LoadOptions& options = {});

/// neuraloperator's .pt files: a torch.save dict {x: bool or float [N, *S], y: float [N, *S]},
/// S = (R1, R2) or (R1, R2, R3) (with a channel layout, [N, C, *S] or [N, *S, C]).
FieldPairs load_torch_file(const std::string& path, const LoadOptions& options = {});

/// HDF5 with arrays (N, R1, R2) or (N, R1, R2, R3), any numeric dtype (with a channel
/// layout, a channel dim more; subsampling leaves it whole). MATLAB v7.3
/// files store arrays column-major, so their dims appear reversed, (R2, R1, N) or
/// (R3, R2, R1, N), and are transposed back.
/// Subsampling reads only the kept points (a strided hyperslab). The file is read
/// once in a forked child first, so that a crash inside libhdf5 on a damaged file
/// becomes an error naming it (the price: the file is read twice).
FieldPairs load_hdf5(const std::string& path, const LoadOptions& options = {});

/// Checks shapes, dtypes and finiteness; throws naming `what` (the file) otherwise.
void validate(const FieldPairs& pairs, const std::string& what);

/// A value stored as an HDF5 attribute.
struct Attribute {
  std::string name;
  std::string text;   // used when !is_number
  double number = 0;  // used when is_number
  bool is_number = false;
};

/// The root attributes of an HDF5 file: scalar numbers (as double) and
/// strings; others are skipped. Read in a forked child first, as load_hdf5.
/// Throws std::runtime_error naming the file.
std::vector<Attribute> read_hdf5_attributes(const std::string& path);

/// Writes float/int/bool tensors as HDF5 datasets (chunked, deflate-compressed),
/// with attributes on the root group, atomically (temporary file, fsync, rename).
void write_hdf5(const std::string& path,
                const std::vector<std::pair<std::string, torch::Tensor>>& datasets,
                const std::vector<Attribute>& attributes = {});

/// How Hdf5SampleWriter lays its datasets out.
struct SampleWriterOptions {
  /// Shuffle + deflate (level 4); off: plain chunks, for outputs of many GB
  /// that deflate would slow to its single thread's pace.
  TORCH_ARG(bool, compress) = true;
  /// > 0: chunks of one sample cut into bands of this many rows along dim
  /// `band_dim` (the dims before it whole, those after whole), for writes of
  /// row bands (write_rows) that cover whole chunks. 0: chunks of whole
  /// samples, split when over ~1 MiB.
  TORCH_ARG(int64_t, band_rows) = 0;
  TORCH_ARG(int64_t, band_dim) = 1;
  /// commit() renames the file over one at the path (an --overwrite), in
  /// one step, so the path holds the old file or the new one whole; off:
  /// never over a file there.
  TORCH_ARG(bool, replace) = false;
};

/// Writes float32 datasets of shape (N, *S) a few samples at a time into a
/// temporary file beside `path` (chunks of one sample, split when over ~1 MiB;
/// shuffle + deflate; no object timestamps, so equal contents give equal
/// bytes). commit() adds root attributes, fsyncs and renames the file to
/// `path`, but never over a file there unless options.replace() (it throws
/// instead, even for one that appeared meanwhile); destroyed without commit() (an error, an
/// interrupt) it removes the temporary file, so `path` is never left partial.
class Hdf5SampleWriter {
 public:
  /// `datasets`: names ('/' makes groups) and shapes (N, *S), N >= 1.
  Hdf5SampleWriter(const std::string& path,
                   const std::vector<std::pair<std::string, std::vector<int64_t>>>& datasets,
                   const SampleWriterOptions& options = {});
  ~Hdf5SampleWriter();
  Hdf5SampleWriter(const Hdf5SampleWriter&) = delete;
  Hdf5SampleWriter& operator=(const Hdf5SampleWriter&) = delete;

  /// Writes samples [first, first + b) of dataset `name`: data [b, *S], any
  /// float dtype, on any device (converted to float32 on the CPU).
  void write(const std::string& name, int64_t first, const torch::Tensor& data);
  /// Writes a band of rows: samples [first, first + b) and rows [row0, row0 +
  /// rows) of dim `dim` (>= 1) of dataset `name`, from data whose shape is the
  /// dataset's but for b and rows; the rest of the dataset is not touched.
  void write_rows(const std::string& name, int64_t first, int64_t dim, int64_t row0,
                  const torch::Tensor& data);
  /// Root attributes, flush, close, fsync, rename to the path; once. After
  /// release() it opens the temporary file again first. A joined writer
  /// cannot commit.
  void commit(const std::vector<Attribute>& attributes = {});
  const std::string& path() const;

  /// Writes the chunks, closes the file and returns the temporary file's
  /// path, which stays (the datasets whole in shape) for other processes to
  /// write into (join) until commit(); destroyed without commit() the writer
  /// still removes it. A joined writer releases its hold of the file alone.
  /// No write may follow.
  std::string release();
  /// Opens the temporary file of a writer that released it (release()'s
  /// path) to write into its datasets `names` (write, write_rows), e.g. one
  /// process's rows of a file others write in turn. Its release() flushes
  /// and closes; it never commits, and never removes the file.
  static std::unique_ptr<Hdf5SampleWriter> join(const std::string& temp_path,
                                                const std::vector<std::string>& names);

 private:
  Hdf5SampleWriter();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------
// Normalization to zero mean and unit std over the training samples, in one of
// two layouts:
// - kChannel, neuraloperator's UnitGaussianNormalizer: one mean and (unbiased)
//   std per channel, over every dim but the channel dim; eps 1e-7.
// - kPointwise, the FNO paper's (its utilities3.py): one per channel and grid
//   point, over the samples alone; eps 1e-5.
// - kBenchmark: per channel, statistics a benchmark ships (The Well's
//   stats.yaml, fno_data/benchmark.h) set with set_state; eps 0, as the_well's
//   ZScoreNormalization divides by its (clipped) std. fit() fits per channel.
// ---------------------------------------------------------------------------
enum class NormalizerMode { kChannel, kPointwise, kBenchmark };

class UnitGaussianNormalizer {
 public:
  explicit UnitGaussianNormalizer(NormalizerMode mode = NormalizerMode::kChannel) : mode_(mode) {}
  /// Fits the mean and std of data [N, C, *S] per channel (kChannel) or per
  /// channel and grid point (kPointwise).
  void fit(const torch::Tensor& data);
  // x: [B, C, *S] -> (x - mean) / (std + eps)
  torch::Tensor transform(const torch::Tensor& x) const;
  // x: [B, C, *S] -> x * (std + eps) + mean
  torch::Tensor inverse_transform(const torch::Tensor& x) const;
  void to(const torch::Device& device);
  bool fitted() const { return mean_.defined(); }
  NormalizerMode mode() const { return mode_; }
  double eps() const {
    return mode_ == NormalizerMode::kPointwise   ? kPointwiseEps
           : mode_ == NormalizerMode::kBenchmark ? 0.0
                                                 : kEps;
  }
  const torch::Tensor& mean() const { return mean_; }
  const torch::Tensor& std() const { return std_; }
  /// For checkpoints: {prefix + "mean", prefix + "std"}.
  std::vector<std::pair<std::string, torch::Tensor>> state(const std::string& prefix) const;
  /// From a checkpoint. Once fitted, the shapes must be the fitted ones (a
  /// checkpoint of the other mode or data): std::invalid_argument naming both.
  void set_state(torch::Tensor mean, torch::Tensor std);

  static constexpr double kEps = 1e-7;           // neuraloperator's
  static constexpr double kPointwiseEps = 1e-5;  // the FNO paper's

 private:
  NormalizerMode mode_ = NormalizerMode::kChannel;
  torch::Tensor mean_;  // [1, C, 1...] (kChannel) or [1, C, *S] (kPointwise)
  torch::Tensor std_;   // the same
};

// ---------------------------------------------------------------------------
// Batching: sample indices per batch for one epoch. With shuffle, the order is
// a permutation drawn from its own generator seeded by (seed, epoch), so it is
// the same after a resume and independent of any other use of the RNG.
//
// Several processes (world_size > 1) shard the epoch as torch's
// DistributedSampler does (drop_last=False): the order is padded to a multiple
// of world_size with its own first entries, and rank r takes entries r,
// r + world_size, r + 2 world_size, ...; every rank gets the same number of
// samples, and batch k of all ranks together is batch k of one process with
// batch_size x world_size (when world_size divides n_samples, exactly).
// ---------------------------------------------------------------------------
std::vector<torch::Tensor> epoch_batches(int64_t n_samples, int64_t batch_size, bool shuffle,
                                         uint64_t seed, int64_t epoch, int64_t rank = 0,
                                         int64_t world_size = 1);

}  // namespace fno::data
