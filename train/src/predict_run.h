// Internal to predict(): one fno_predict run, its steps in predict()'s order
// (predict.cpp); what a step finds is kept for the next. The model's loading
// is in predict_model.cpp, the inputs' opening in predict_inputs.cpp.
#pragma once

#include <fno/fno.h>
#include <fno/precision.h>
#include <fno_data/darcy.h>
#include <fno_engine/forward_graphs.h>
#include <fno_engine/forward_plan.h>
#include <fno_engine/tiled_runner.h>
#include <fno_offload/offload.h>
#include <fno_train/config.h>
#include <fno_train/distributed.h>
#include <fno_train/predict.h>

#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "predict_inputs.h"
#include "predict_ns.h"
#include "predict_progress.h"

namespace fno::detail {

class DomainPrediction;

class PredictRun {
 public:
  // (a domain-parallel run, predict_domain.cpp, takes the model, the inputs
  // and the output from here)
  friend class DomainPrediction;
  friend PredictResult predict_domain(const PredictOptions& options);

  explicit PredictRun(const PredictOptions& options);

  // The request alone: required options, ranges, the output not there yet.
  void check_request();
  // The model's settings (a run's config.yaml, or --model-config and --set),
  // its weights and the run's normalizers; the precision and the device.
  void load_model();
  // The inputs (read whole, or opened for streaming) and the truth, checked
  // against the model.
  void open_inputs();
  // A Navier-Stokes run's records opened to be read by rows (ns_rows), for
  // domain parallel (predict_ns_rows.cpp); checked as open_inputs checks them.
  void open_ns_rows();
  // The plan: whole grid in batches or micro-batches, tiles, or streamed.
  void choose();
  // The forward of every sample into the output file, and the errors.
  void run_forward();
  // The output's attributes, the file renamed into place, the summary.
  PredictResult finish();

 private:
  void load_config_of_model();
  void open_ns_inputs();
  void accept_ns_inputs(torch::IntArrayRef records);
  void check_grid() const;
  void run_streamed(PredictProgress& progress, offload::Offloader& offloader);
  void write_errors(int64_t first, const torch::Tensor& out, const torch::Tensor& yb);
  void add_errors(int64_t first, const torch::Tensor& l2, const torch::Tensor& h1);
  torch::Tensor forward(const torch::Tensor& xb);

  const PredictOptions& o;
  const std::string summary_path;
  PredictResult r;
  std::vector<std::string> input_paths;  // o.inputs, or o.input alone
  std::string inputs_text;               // "a.h5" or "a.h5, b.h5"
  // load_model
  bool state_dict_model = false;
  std::string cfg_path, cfg_text, weights_path;
  RunConfig cfg;
  Precision precision = Precision::kFP32;
  torch::Device device{torch::kCPU};
  std::optional<MatmulPrecisionGuard> matmul;
  FNO model{nullptr};
  data::UnitGaussianNormalizer in_norm, out_norm;
  Progress progress_mode = Progress::kAuto;
  std::optional<NsPrediction> ns;         // a Navier-Stokes run
  std::unique_ptr<NsRecordRows> ns_rows;  // its records by rows (open_ns_rows)
  // open_inputs
  bool truth = false;
  data::LoadOptions lo;
  std::unique_ptr<InputFiles> files;
  torch::Tensor x, y;
  std::vector<int64_t> x_shape;  // [n, Cin, *S]
  std::vector<int64_t> grid_v;   // S
  int64_t n = 0, n_dim = 0;
  std::string xk;
  // choose
  int64_t batch = 0, elem = 0, points = 1;
  bool stream = false;
  std::optional<ForwardPlan> plan;
  std::optional<StreamedPlan> streamed;
  std::unique_ptr<TiledRunner> tiled;     // plan's tiles, when it has them
  std::unique_ptr<ForwardGraphs> graphs;  // plan's CUDA graphs, when it has them
  // run_forward
  std::unique_ptr<data::Hdf5SampleWriter> writer;
  torch::Tensor per_record_sum;            // Navier-Stokes: [t_out] float64, over the samples
  torch::Tensor streamed_l2, streamed_h1;  // streamed with the truth: [n] float64
};

/// Runs `step` on this rank, then agrees over `world` whether every rank got
/// through it (one all-reduce, which is also the barrier before the next
/// step). A rank that failed rethrows its own error; the others throw one
/// naming the first rank that failed, of the same kind (predict_domain.cpp).
void agreed(dist::Group& world, const std::function<void()>& step);

/// Sample group g's share of `total` items among `groups`: contiguous runs as
/// even as can be, the first total % groups one longer (a group may have
/// none). Returns {first, count}.
std::pair<int64_t, int64_t> group_share(int64_t total, int64_t groups, int64_t g);

/// Rank 0's `text` on every rank of `world` (e.g. the path of the output's
/// temporary file, which the ranks write their rows into in turn).
std::string from_main(dist::Group& world, const std::string& text);

/// The forward plan of a band's batch `shape` [b, C, rows, *S'], the same on
/// every rank given the widest band's rows: choose_forward_plan's, or the
/// whole band as one tile when it needs no tiles (a band runs tiled, its
/// spectra added over the ranks). Throws ForwardBudgetError as it does.
ForwardPlan band_plan(FNO model, std::vector<int64_t> shape, const ForwardBudget& budget,
                      const torch::Device& device, int64_t elem);

/// predict() with options.domain_parallel N under torchrun: N ranks share
/// each sample, each its band of rows (predict_domain.cpp). Throws
/// PredictUsageError (one line) for what it does not support.
PredictResult predict_domain(const PredictOptions& options);

}  // namespace fno::detail
