// What the data generators (darcy_gen.cpp, poisson3d_gen.cpp) share, private
// to fno::data: the per-sample random streams, the device choice, the
// attribute helpers, the output file names, and GenOutput, which streams the
// samples into one file or a train/test pair that appear together or not at
// all.
#pragma once

#include <fno_data/darcy.h>
#include <fno_data/darcy_gen.h>

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
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

/// Throws c10::ValueError when out is empty or one of `paths` exists (a
/// directory, or a file: no generator writes over one).
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

/// Per-sample statistics of a batch: (name, [b] values of any dtype and device).
/// GenOutput keeps their largest value per file and their sum.
using SampleStats = std::vector<std::pair<std::string, torch::Tensor>>;

/// A resumable run (DarcyGenHooks::resume): `dir` (empty: not resumable) keeps
/// the finished batches; `settings` (name, value), which every kept batch
/// records, must match those of a run that goes on with them.
struct Resume {
  std::string dir;
  std::vector<std::pair<std::string, std::string>> settings;
  int64_t stop_after = 0;
  int worker = 0, workers = 1;  // DarcyGenHooks::worker, workers
};

/// Resume of `hooks` for the output `out` (dir empty when hooks.resume is off).
Resume resume_of(const DarcyGenHooks& hooks, const std::string& out,
                 std::vector<std::pair<std::string, std::string>> settings);

/// What every generator's resume compares: the problem and its generator's
/// version, the grid, the sample counts, the seed and the subsampling, then
/// the problem's own settings (`own`), then the device and, on CUDA, the
/// batch (whose size changes the numbers there; "any" on the CPU).
struct RunSettings {
  std::string problem;
  int version = 1;
  int64_t resolution = 0, samples = 0, test_samples = 0;
  uint64_t seed = 0;
  int64_t subsample = 1;
  bool cuda = false;
  int64_t batch = 1;
};
std::vector<std::pair<std::string, std::string>> resume_settings(
    const RunSettings& run, const std::vector<std::pair<std::string, std::string>>& own);

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
            const std::vector<std::string>& names, const std::vector<int64_t>& sample_shape,
            Resume resume = {});
  /// Datasets of different sample shapes: (name, sample shape) each. With
  /// resume.dir, the samples kept there by an earlier run are found (and
  /// checked: settings, names, order) and the output files are made at commit.
  GenOutput(const std::vector<std::string>& paths, int64_t total, int64_t test_samples,
            const std::vector<std::pair<std::string, std::vector<int64_t>>>& datasets,
            Resume resume = {});
  ~GenOutput();

  const std::vector<Part>& parts() const { return parts_; }
  /// How many samples are kept (by earlier resumable runs, or other workers,
  /// and this one); complete() when all are.
  int64_t kept() const { return kept_; }
  bool complete() const { return kept_ == total_; }
  /// The next batch this process makes, from sample `from` on with batches of
  /// `batch`: its first sample (total when none is left), the first sample
  /// not kept at or after `from` whose batch (start / batch) is this worker's;
  /// and where it ends: at most `batch` samples, up to the next kept one.
  int64_t next_batch(int64_t from, int64_t batch) const;
  int64_t batch_end(int64_t start, int64_t batch) const;
  /// Writes the run's samples [start, start + b): data[d] is [b, *sample_shape]
  /// for names[d], `stats` their per-sample statistics. Resumable: the batch
  /// becomes one file in resume.dir (none of its samples kept), kept from then on.
  void write(int64_t start, const std::vector<torch::Tensor>& data, const SampleStats& stats = {});
  /// check_stop for this output: `done` samples done (not resumable), or the
  /// samples kept and how to go on; resumable, also stops (signal 0) once
  /// resume.stop_after samples are kept, before the last.
  void check_stop(const DarcyGenHooks& hooks, int64_t done) const;
  /// The largest value of statistic `name` over the samples of part p (0 when none) ...
  double stat_max(size_t p, const std::string& name) const;
  /// ... over all samples, and its sum over all samples.
  double stat_max(const std::string& name) const;
  double stat_sum(const std::string& name) const;
  /// For each file holding some of the samples [start, start + b): fn(part, offset
  /// of its first one in the batch, how many).
  void for_each_share(int64_t start, int64_t b,
                      const std::function<void(size_t, int64_t, int64_t)>& fn) const;
  /// Adds each file's root attributes, attributes(part index), and makes the
  /// files appear; all of them or, on an error, none.
  /// Resumable: the files are made from the kept samples (all of them must
  /// be), then resume.dir is removed.
  void commit(const std::function<std::vector<Attribute>(size_t)>& attributes);

 private:
  struct Shard {
    int64_t first = 0;
    int64_t count = 0;
    std::string path;
  };
  void open_writers();
  void write_files(int64_t start, const std::vector<torch::Tensor>& data);
  void add_stats(int64_t start, int64_t b, const std::vector<std::pair<std::string, std::vector<double>>>& stats);
  void find_kept();

  std::vector<Part> parts_;
  std::vector<std::unique_ptr<Hdf5SampleWriter>> writers_;
  std::vector<std::string> names_;
  std::vector<std::pair<std::string, std::vector<int64_t>>> datasets_;  // sample shapes
  int64_t total_ = 0;
  Resume resume_;
  bool created_dir_ = false;  // find_kept made resume_.dir (removed again if left empty)
  int64_t kept_ = 0;
  std::vector<Shard> shards_;
  std::vector<std::map<std::string, double>> max_;  // per part
  std::map<std::string, double> sum_;
};

/// What a run's progress counts, in samples: the set's kept samples of all of
/// them; a worker's (hooks.workers > 1), its own batches' samples made of those
/// it makes (the batches other workers keep meanwhile are not seen).
class GenProgress {
 public:
  /// Before the run's first batch; `batch` as next_batch's.
  GenProgress(const GenOutput& output, const DarcyGenHooks& hooks, int64_t total, int64_t batch);
  /// The samples done when the output keeps `kept` (GenOutput::kept()), and of
  /// how many: hooks.progress's arguments.
  int64_t done(int64_t kept) const { return kept - base_; }
  int64_t of() const { return of_; }

 private:
  int64_t base_ = 0;  // a worker: the samples kept before it started
  int64_t of_ = 0;
};

/// After a run's batches: a worker's (hooks.workers > 1), or a run that left
/// samples to others, ends with summary (written false, the samples kept,
/// the seconds since t0) and true: its batches are kept and no file is
/// written. Otherwise false: the run goes on to write its files.
bool ends_as_worker(const GenOutput& output, const DarcyGenHooks& hooks, int64_t total,
                    std::chrono::steady_clock::time_point t0, DarcyGenSummary& summary);

}  // namespace fno::data::gen
