// What every data generator of fno_datagen shares (Darcy, fno_data/darcy_gen.h;
// the periodic 3D Poisson problem, fno_data/poisson3d_gen.h; Navier-Stokes,
// fno_data/navier_stokes_gen.h): the options every run has, the hooks a
// caller passes (progress, stop, resume, workers) and the summary a run
// returns. The batch loop behind them is one for all problems: each problem
// gives only its sampler and its solver.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fno::data {

/// A chained setter and a getter, as TORCH_ARG, whose setter returns the
/// derived options type, so that common and problem options chain in any order.
#define FNO_GEN_ARG(T, name)                               \
 public:                                                   \
  Derived& name(const T& new_##name) {                     \
    this->name##_ = new_##name;                            \
    return static_cast<Derived&>(*this);                   \
  }                                                        \
  const T& name() const noexcept { return this->name##_; } \
  T& name() noexcept { return this->name##_; }             \
                                                           \
 private:                                                  \
  T name##_ /* NOLINT */

/// The options every generator has; a problem's options derive from it
/// (struct DarcyGenOptions : GeneratorOptions<DarcyGenOptions>).
template <typename Derived>
class GeneratorOptions {
 public:
  explicit GeneratorOptions(int64_t resolution) : resolution_(resolution) {}
  /// Grid points per side of the problem's grid (see each problem).
  FNO_GEN_ARG(int64_t, resolution);
  /// Samples in all (1 to 10^9); sample i depends only on (seed, i).
  FNO_GEN_ARG(int64_t, samples) = 1;
  /// Seed of the random fields.
  FNO_GEN_ARG(uint64_t, seed) = 0;
  /// The last test_samples samples go to a separate test file (0: one file).
  FNO_GEN_ARG(int64_t, test_samples) = 0;
  /// Store every k-th grid point per side (see each problem for what k must divide).
  FNO_GEN_ARG(int64_t, subsample) = 1;
  /// Samples solved together, 0: automatic (each problem says how).
  FNO_GEN_ARG(int64_t, batch_size) = 0;
  /// "cpu", "cuda", "cuda:N" or "auto" (CUDA when available).
  FNO_GEN_ARG(std::string, device) = "auto";
  /// Output file (.h5); with test_samples > 0, STEM_train.EXT and STEM_test.EXT instead.
  FNO_GEN_ARG(std::string, out) = "";
  /// Stored in the files' command_line attribute.
  FNO_GEN_ARG(std::string, command_line) = "";
};

struct GenHooks {
  /// Called as the run goes on with the units done and the total (samples;
  /// Navier-Stokes: records of samples; Darcy --inputs-only: rows of samples).
  std::function<void(int64_t done, int64_t total)> progress;
  /// Polled before each batch (and within long ones); a non-zero answer (a
  /// signal number) stops the run with DatagenInterrupted, leaving no output file.
  std::function<int()> stop_requested;
  /// Resumable (fno_datagen --resume): each finished batch is kept as its own
  /// file (written atomically) in the directory datagen_partial_dir(out), and
  /// a run finds the samples kept there by an earlier one, checks that they
  /// were made with the same settings and goes on after them; at the end the
  /// output files are made from the kept samples (the same bytes as a run
  /// without resume) and the directory is removed. A stop leaves the kept
  /// samples. Refused (c10::ValueError): other settings, or no directory while
  /// an output file exists; a directory that holds anything else or damaged
  /// files: std::runtime_error.
  bool resume = false;
  /// With resume: stops with DatagenInterrupted (signal 0) before a batch
  /// once at least this many samples are kept (0: never; for tests).
  int64_t stop_after_samples = 0;
  /// With resume: called once before the first batch with the samples kept.
  std::function<void(int64_t kept, int64_t total)> resumed;
  /// With resume, worker `worker` of `workers` processes that make one run's
  /// samples together in the same directory (one per GPU, say): it makes only
  /// the run's batches j (samples [j B, (j + 1) B), B the batch size) with
  /// j % workers == worker that are not kept yet, and returns once they are,
  /// without the output files (GenSummary::written false). A run without
  /// workers then makes any batch still missing and writes the files: the
  /// same bytes as one run on CUDA with the same batch size (and on the CPU).
  int worker = 0;
  int workers = 1;
};

/// Where a resumable run keeps its finished samples: OUT.partial (a directory).
std::string datagen_partial_dir(const std::string& out);

/// The run stopped on request (SIGINT, SIGTERM; signal() 0: stop_after_samples
/// was reached): no output file was written (a resumable run keeps its samples).
class DatagenInterrupted : public std::runtime_error {
 public:
  DatagenInterrupted(int signal, const std::string& what)
      : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

struct GenSummary {
  std::vector<std::string> files;
  std::string device;
  int64_t samples = 0;
  double seconds = 0;
  double max_residual = 0;     // largest relative residual of the solves (Darcy, Poisson)
  int64_t max_iterations = 0;  // Darcy: CG iterations
  double mean_iterations = 0;
  double max_abs = 0;        // Navier-Stokes: the largest |vorticity| stored
  int64_t batch = 0;         // the samples solved together
  double solve_seconds = 0;  // Navier-Stokes: the time in the solver (device to host included)
  bool written = true;       // false: a worker's batches kept, no file written (hooks.workers)
  int64_t kept = 0;          // the samples kept in all (written false)
  /// The problem's own result lines, as fno_datagen prints them after
  /// "seconds" ("max_residual 3.1e-11", "cg_iterations mean 24.0 max 26").
  std::vector<std::string> report;
};

}  // namespace fno::data
