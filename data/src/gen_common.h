// What the data generators (darcy_gen.cpp, poisson3d_gen.cpp,
// navier_stokes_gen.cpp) share, private to fno::data: the per-sample random
// streams, the device choice, the attribute helpers, the output file names,
// GenOutput, which streams the samples into one file or a train/test pair
// that appear together or not at all, and run_generator, the one batch loop
// (progress, stop, resume, workers) into which each problem plugs its
// sampler and solver (a GenSpec).
#pragma once

#include <fno_data/darcy.h>
#include <fno_data/generator.h>

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
  /// The next n numbers, as n calls of operator() give them (the same bits),
  /// the generator's draws in order and their transforms on several threads.
  void fill(double* out, int64_t n);

 private:
  std::mt19937_64 engine_;
  bool have_spare_ = false;
  double spare_ = 0;
};

std::string format_number(double v);

/// Every k-th point along the `dims` spatial dims after the batch's:
/// x[:, ::k, ::k] for dims 2 ([B, R, R], or [B, R, R, T] with T kept whole),
/// x[:, ::k, ::k, ::k] for 3. A view; x itself for k = 1.
torch::Tensor every_kth(const torch::Tensor& x, int64_t k, int64_t dims);
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

/// "SIGINT", "SIGTERM" or "a signal".
const char* signal_name(int sig);

/// Throws DatagenInterrupted when hooks.stop_requested answers a signal.
void check_stop(const GenHooks& hooks, int64_t done, int64_t total);

/// Per-sample statistics of a batch: (name, [b] values of any dtype and device).
/// GenOutput keeps their largest value per file and their sum.
using SampleStats = std::vector<std::pair<std::string, torch::Tensor>>;

/// A resumable run (GenHooks::resume): `dir` (empty: not resumable) keeps
/// the finished batches; `settings` (name, value), which every kept batch
/// records, must match those of a run that goes on with them.
struct Resume {
  std::string dir;
  std::vector<std::pair<std::string, std::string>> settings;
  int64_t stop_after = 0;
  int worker = 0, workers = 1;  // GenHooks::worker, workers
};

/// Resume of `hooks` for the output `out` (dir empty when hooks.resume is off).
Resume resume_of(const GenHooks& hooks, const std::string& out,
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
  class File;  // the HDF5 writer of one part (gen_output.cpp)
  struct Part {
    std::string path;
    std::string split;  // "all", "train" or "test"
    int64_t first = 0;  // the run's index of the file's first sample
    int64_t count = 0;
  };

  /// `datasets`: (name, sample shape) each. With resume.dir, the samples
  /// kept there by an earlier run are found (and checked: settings, names,
  /// order) and the output files are made at commit. chunk_rows > 0: the
  /// datasets are (N, R1, R2), chunked by rows, (1, chunk_rows, R2), not
  /// compressed (Hdf5SampleWriter's bands), and written band by band (write_rows, then
  /// mark_written); not resumable.
  GenOutput(const std::vector<std::string>& paths, int64_t total, int64_t test_samples,
            const std::vector<std::pair<std::string, std::vector<int64_t>>>& datasets,
            Resume resume = {}, int64_t chunk_rows = 0);
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
  /// Row layout: rows [row, row + r) of the run's sample `sample` of dataset
  /// `dataset` (an index into the datasets), data [r, R2] ...
  void write_rows(size_t dataset, int64_t sample, int64_t row, const torch::Tensor& data);
  /// ... and, once all rows of the samples [start, start + b) are written,
  /// their statistics: they are kept from then on.
  void mark_written(int64_t start, int64_t b, const SampleStats& stats = {});
  /// check_stop for this output: `done` samples done (not resumable), or the
  /// samples kept and how to go on; resumable, also stops (signal 0) once
  /// resume.stop_after samples are kept, before the last.
  void check_stop(const GenHooks& hooks, int64_t done) const;
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
  void add_stats(int64_t start, int64_t b,
                 const std::vector<std::pair<std::string, std::vector<double>>>& stats);
  void find_kept();

  std::vector<Part> parts_;
  std::vector<std::unique_ptr<File>> writers_;
  std::vector<std::string> names_;
  std::vector<std::pair<std::string, std::vector<int64_t>>> datasets_;  // sample shapes
  int64_t total_ = 0;
  Resume resume_;
  int64_t chunk_rows_ = 0;    // > 0: the row layout
  bool created_dir_ = false;  // find_kept made resume_.dir (removed again if left empty)
  int64_t kept_ = 0;
  std::vector<Shard> shards_;
  std::vector<std::map<std::string, double>> max_;  // per part
  std::map<std::string, double> sum_;
};

// ---------------------------------------------------------------------------
// The batch loop
// ---------------------------------------------------------------------------

/// What a problem's make_batch may call while it makes a batch.
struct BatchContext {
  /// Polls hooks.stop_requested within a long batch (DatagenInterrupted);
  /// `done`: the samples done, for the message.
  std::function<void(int64_t done)> check_stop;
  /// The batch's units done so far, of b x units_per_sample (hooks.progress).
  std::function<void(int64_t units)> progress;
  /// Row layout: rows [row, row + r) of the run's sample `sample` of dataset d.
  std::function<void(size_t d, int64_t sample, int64_t row, const torch::Tensor& rows)> write_rows;
};

/// A batch made: one float tensor [b, *sample shape] per dataset (none in
/// the row layout, whose rows went to BatchContext::write_rows), and the
/// per-sample statistics the files' attributes and the summary use.
struct GenBatch {
  std::vector<torch::Tensor> data;
  SampleStats stats;
};

/// One problem, as run_generator runs it.
struct GenSpec {
  /// The problem's name and version, the grid, counts, seed, subsampling,
  /// device kind and batch size: the settings every resume compares ...
  RunSettings run;
  /// ... then the problem's own (name, value).
  std::vector<std::pair<std::string, std::string>> own;
  std::string out;                 // the --out option (the resume directory's name)
  std::vector<std::string> paths;  // the files, output_paths(out, test_samples)
  std::vector<std::pair<std::string, std::vector<int64_t>>> datasets;  // (name, sample shape)
  int64_t chunk_rows = 0;  // > 0: the row layout (GenOutput)
  torch::Device device{torch::kCPU};
  /// What the progress counts per sample (Navier-Stokes: records; rows).
  int64_t units_per_sample = 1;
  /// Makes the run's samples [start, start + b).
  std::function<GenBatch(int64_t start, int64_t b, const BatchContext& ctx)> make_batch;
  /// Root attributes of part p of the output (GenOutput::parts()).
  std::function<std::vector<Attribute>(const GenOutput& output, size_t p)> attributes;
  /// After the files are written: the problem's summary fields and report lines.
  std::function<void(const GenOutput& output, GenSummary& summary)> summarize;
};

/// The batch loop of every generator: finds the samples a resumable run kept,
/// makes the others batch by batch (a worker: its own batches), polls the
/// stop request before each batch, reports progress, and writes the files
/// atomically at the end (a worker writes none). t0: when the run started.
GenSummary run_generator(const GenSpec& spec, const GenHooks& hooks,
                         std::chrono::steady_clock::time_point t0);

}  // namespace fno::data::gen
