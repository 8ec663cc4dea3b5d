// What the data generators (darcy_gen.cpp, poisson3d_gen.cpp) share, private
// to fno::data: the per-sample random streams, the device choice, the
// attribute helpers, the output file names, and GenOutput, which streams the
// samples into one file or a train/test pair that appear together or not at
// all.
#pragma once

#include <fno_data/darcy.h>
#include <fno_data/darcy_gen.h>

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace fno::data::gen {

constexpr double kPi = 3.14159265358979323846;

/// At most this many samples a run. With each generator's grid limits the
/// datasets' byte counts stay far inside 64 bits (HDF5 crashes on datasets
/// whose size overflows; 2^52 Darcy samples at 64 x 64 did); Navier-Stokes
/// checks its records' bytes too.
constexpr int64_t kMaxSamples = 1000000000;

uint64_t splitmix64(uint64_t x);

/// Standard normal numbers of sample `index` under `seed`, from an mt19937_64
/// seeded by (seed, index) alone, by Box-Muller: the same numbers whatever the
/// batch, the device or LibTorch's RNG.
class StandardNormals {
 public:
  StandardNormals(uint64_t seed, int64_t index);
  double operator()();

 private:
  std::mt19937_64 engine_;
  bool have_spare_ = false;
  double spare_ = 0;
};

std::string format_number(double v);
Attribute text_attr(const std::string& name, const std::string& text);
Attribute number_attr(const std::string& name, double v);

/// "auto", "cpu", "cuda", "cuda:N" -> a device; throws c10::ValueError otherwise
/// (or when CUDA is asked for and absent).
torch::Device resolve_device(const std::string& name);

/// {out}, or {STEM_train.EXT, STEM_test.EXT} (EXT ".h5" when `out` has none)
/// when test_samples > 0.
std::vector<std::string> output_paths(const std::string& out, int64_t test_samples);

/// Throws c10::ValueError when out is empty or one of `paths` is a directory.
void check_output_paths(const std::string& out, const std::vector<std::string>& paths);

/// The checks every generator makes, in its order: the sample counts first
/// (samples in [1, kMaxSamples], test_samples in [0, samples - 1]) ...
void check_sample_counts(int64_t samples, int64_t test_samples);
/// ... and last the batch size (>= 0), the output files and the device. Each
/// throws c10::ValueError naming the option and its value.
void check_batch_out_device(int64_t batch_size, const std::string& out,
                            const std::vector<std::string>& paths, const std::string& device);

/// The root attributes every generator writes about its grid: resolution,
/// subsample, stored_resolution.
std::vector<Attribute> grid_attrs(int64_t resolution, int64_t subsample, int64_t stored);
/// ... about its seed: seed (a number) and seed_text (exact).
std::vector<Attribute> seed_attrs(uint64_t seed);
/// ... and about the file's share of the run: split, samples, first_sample, total_samples.
std::vector<Attribute> split_attrs(const std::string& split, int64_t count, int64_t first,
                                   int64_t total);
/// Appends `more` to `attrs`.
void append(std::vector<Attribute>& attrs, const std::vector<Attribute>& more);

/// Throws DatagenInterrupted when hooks.stop_requested answers a signal.
void check_stop(const DarcyGenHooks& hooks, int64_t done, int64_t total);

/// The output files of one run of `total` samples: paths[0] holds samples
/// [0, total - test_samples) ("all", or "train" with a test split), paths[1]
/// the last test_samples ("test"). Each holds float32 datasets `names`, of
/// shape (count, *sample_shape), written sample by sample in the run's order
/// (so that equal data give equal bytes whatever the batch size).
class GenOutput {
 public:
  struct Part {
    std::string path;
    std::string split;  // "all", "train" or "test"
    int64_t first = 0;  // the run's index of the file's first sample
    int64_t count = 0;
  };

  GenOutput(const std::vector<std::string>& paths, int64_t total, int64_t test_samples,
            const std::vector<std::string>& names, const std::vector<int64_t>& sample_shape);
  /// Datasets of different sample shapes: (name, sample shape) each.
  GenOutput(const std::vector<std::string>& paths, int64_t total, int64_t test_samples,
            const std::vector<std::pair<std::string, std::vector<int64_t>>>& datasets);
  ~GenOutput();

  const std::vector<Part>& parts() const { return parts_; }
  /// Writes the run's samples [start, start + b): data[d] is [b, *sample_shape] for names[d].
  void write(int64_t start, const std::vector<torch::Tensor>& data);
  /// For each file holding some of the samples [start, start + b): fn(part, offset
  /// of its first one in the batch, how many).
  void for_each_share(int64_t start, int64_t b,
                      const std::function<void(size_t, int64_t, int64_t)>& fn) const;
  /// Adds each file's root attributes, attributes(part index), and makes the
  /// files appear; all of them or, on an error, none.
  void commit(const std::function<std::vector<Attribute>(size_t)>& attributes);

 private:
  std::vector<Part> parts_;
  std::vector<std::unique_ptr<Hdf5SampleWriter>> writers_;
  std::vector<std::string> names_;
};

}  // namespace fno::data::gen
