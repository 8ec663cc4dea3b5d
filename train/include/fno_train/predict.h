// Prediction: a trained FNO applied to new inputs at any grid (fno_predict).
//
// predict() reads a run directory (its resolved config.yaml and model.pt, or a
// named checkpoint; or a state dict with its model's settings), builds the
// model, applies the run's normalizers as training does, reads inputs with the
// data loaders (HDF5 or neuraloperator .pt, one file or several; a range of
// samples; the truth optional), runs the forward batch by
// batch under one plan, and writes the decoded predictions with
// data::Hdf5SampleWriter (a temporary file renamed at the end; the settings as
// root attributes). Given the truth it adds each sample's relative L2 and H1
// errors to the output and writes a summary beside it (atomically).
//
// The plan: on the CPU, or without a GPU memory limit, the whole grid in
// batches of batch_size; with a limit on a GPU, the largest micro-batch whose
// estimated forward fits, else tiles of rows (fno/tiled.h) with block inputs on
// the GPU or remade, else a refusal naming the floor. HDF5 inputs that need
// tiles, or whose arrays do not fit host_memory_limit, are streamed: their rows
// read per tile (data::Hdf5SlabReader), the output written per tile (and the
// truth's rows read beside it, each sample's errors added up over the tiles),
// block inputs on the device, in pinned host memory or remade. On a GPU the
// whole-grid micro-batches may replay as CUDA graphs (cuda_graphs). It is said
// in one line (PredictResult::plan). Several input files are one set of
// samples, in order.
//
// A Navier-Stokes run (data.problem ns) predicts the t_out records after the
// input's first t_in: the recurrent FNO-2D rolled out, or the space-time
// FNO-3D, as fno_train's evaluation (predict_ns.h); held in memory, not
// streamed. Long runs show their progress on stderr (samples, or tiles when
// streamed).
//
// Under torchrun, domain_parallel N splits each sample's rows over N ranks
// (the forward of fno_train's distributed.domain_parallel), the groups of N
// splitting the samples; the ranks write their rows of the one output in
// turn (predict_domain.cpp).
//
// A run trained on benchmark data (data.format well, pdebench, pdearena)
// reads --input as the benchmark's files and predicts the next steps of each
// window, its metric per field in the summary (predict_benchmark.h).
//
// Every error is std::runtime_error with a one-line message naming the file,
// key or value; PredictUsageError marks the ones of the command line (an
// existing output, a bad range). No output file is left behind by an error.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace fno {

/// An error of the request itself (an output that exists, a bad sample range,
/// a value out of range), as opposed to bad model or input files.
class PredictUsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PredictOptions {
  /// The training run's directory: config.yaml, model.pt, normalizers.pt or
  /// checkpoints; with model_config, a state dict file (neuraloperator 2.0.0's
  /// FNO.state_dict(), torch.save'd, or a model.pt).
  std::string run_dir;
  /// The model's settings for a state dict in run_dir: a YAML file in
  /// fno_train's keys (its model: section; data.train_file may be left out).
  /// The output is the model's own (no normalizers apply). "" and no
  /// model_settings: run_dir is a run.
  std::string model_config;
  /// Settings of a state dict's model, "model.KEY=VALUE" in fno_train's keys
  /// (as its --set, parsed by the same config schema), over model_config's,
  /// or alone. Given, run_dir is a state dict.
  std::vector<std::string> model_settings;
  /// The weights: "" takes run_dir/model.pt; else a state dict (model.pt-like)
  /// or a checkpoint (its model.* keys, and its norm.* keys when present).
  std::string checkpoint;
  /// The input file (.pt, .h5, .mat v7.3).
  std::string input;
  /// Several input files, in order, instead of `input`: their samples one
  /// after another are the set that first/count index. They must agree on
  /// the arrays' channels and grid.
  std::vector<std::string> inputs;
  /// The input array's name; "": the run's data.x_key, else the loader's default.
  std::string x_key;
  /// The truth's name; "": no truth is read (no errors, no summary).
  std::string y_key;
  /// The samples [first, first + count); count -1: to the end of the files.
  int64_t first = 0;
  int64_t count = -1;
  /// The output HDF5 file; its summary goes to <out without .h5>.summary.json.
  std::string out;
  /// Replace an existing output (and summary) instead of refusing.
  bool overwrite = false;
  /// Samples per forward batch; 0: the run's first test set's batch size.
  int64_t batch_size = 0;
  /// GPU bytes the forward may take (0: no limit; the whole grid, batch_size at once).
  int64_t gpu_memory_limit = 0;
  /// Host bytes the run's data may take: the input and output held, their
  /// tiles, the pinned stores, HDF5's caches (0: no limit). An HDF5 input
  /// whose arrays do not fit is streamed tile by tile; below the floor of
  /// streaming, a refusal names both.
  int64_t host_memory_limit = 0;
  /// "fp32", "tf32", "bf16", "fp16"; "": the run's training.precision.
  std::string precision;
  /// "auto" (CUDA when there is one), "cpu", "cuda", "cuda:N".
  std::string device = "auto";
  /// Force tiles of this many rows of the first spatial dim (0: the plan decides).
  /// For tests and measurements. With an HDF5 input and no truth the
  /// prediction is then streamed (the input read and the output written per
  /// tile); else block inputs stay on the device.
  int64_t tile_rows = 0;
  /// CUDA graphs of the whole-grid forward (fno_engine/forward_graphs.h):
  /// "auto" (a micro-batch shape whose forward takes at most 20 ms is captured
  /// after its warm-up and replayed), "on" (every shape seen twice) or "off".
  std::string cuda_graphs = "auto";
  /// Progress on stderr: "auto" (a bar on a terminal, plain lines when piped),
  /// "bar", "plain" or "none". Short runs show none.
  std::string progress = "auto";
  /// Seconds between plain progress lines.
  double progress_every = 10;
  /// A run trained on benchmark data (data.format): the split of --input read
  /// ("": the run's first test set's, else test), and whether each of its
  /// trajectories is also rolled out.
  std::string split;
  bool rollout = false;
  /// Under torchrun: the ranks that share each sample, each a band of rows of
  /// the first spatial dim (docs/domain_parallel.md); it must divide the
  /// world size, whose W / N groups of ranks split the samples. Each rank
  /// reads its rows alone and writes them into the one output in turn. 0:
  /// one process (refused under torchrun with several ranks).
  int64_t domain_parallel = 0;
  /// Under torchrun: seconds a rank waits for the others (the rendezvous,
  /// each collective) before it stops with an error naming the rank.
  double timeout_s = 300;
};

struct PredictResult {
  int64_t n_samples = 0;
  std::vector<int64_t> grid;  // the input's spatial sizes
  /// One line: device, precision, whole grid or tiles, micro-batch, budget.
  std::string plan;
  /// Where the normalizers came from ("normalizers.pt", "checkpoint_latest.pt", ...; "" none).
  std::string normalizers;
  /// Per-sample relative errors of the decoded prediction (empty without truth).
  std::vector<double> l2, h1;
  double mean_l2 = 0, mean_h1 = 0;
  /// Navier-Stokes: each predicted record's relative L2 error, the mean over
  /// the samples (fno_train's "<set>_l2_per_step"); empty otherwise.
  std::vector<double> l2_per_record;
  std::string out, summary;  // the files written (summary "" without truth)
  /// The GPU's peak allocated bytes over the forward (0 on the CPU).
  int64_t gpu_peak_bytes = 0;
  /// Wall seconds of the forward over every sample (the file's reads and writes
  /// of a streamed prediction included).
  double forward_wall_s = 0;
  /// A streamed prediction's file work, which runs on its own thread beside
  /// the forward: seconds reading the input and writing the output, and the
  /// seconds the forward waited for them (what did not overlap).
  double read_s = 0, write_s = 0, read_wait_s = 0, write_wait_s = 0;
  /// Each batch's forward seconds (normalize, model, decode; the input already on
  /// the device, the device synchronized before and after), in order; empty when
  /// streamed. The first batch's includes the FFT plans' set-up.
  std::vector<double> forward_seconds;
  /// A run trained on benchmark data: the benchmark's metric per field
  /// ("vrmse_density", "vrmse", "rollout_vrmse_density", ...).
  std::map<std::string, double> metrics;
  /// false on the ranks but rank 0 of a domain-parallel run (rank 0 writes
  /// the summary; the others print nothing).
  bool main = true;
};

/// The summary's path for an output path: "dir/name.h5" -> "dir/name.summary.json".
std::string predict_summary_path(const std::string& out);

/// Runs the prediction; see the header comment. Throws on any error (nothing written).
PredictResult predict(const PredictOptions& options);

}  // namespace fno
