#include <fno_train/predict.h>

#include <fno/fno.h>
#include <fno/precision.h>
#include <fno/serialize.h>
#include <fno/tiled.h>
#include <fno_data/darcy.h>
#include <fno_data/hdf5_slab.h>
#include <fno_engine/forward_graphs.h>
#include <fno_engine/forward_plan.h>
#include <fno_engine/tiled_plan.h>
#include <fno_offload/planner.h>
#include <fno_train/config.h>
#include <fno_train/train_step.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <tuple>

#include "dict_prefix.h"
#include "json.h"
#include "predict_benchmark.h"
#include "predict_ns.h"
#include "predict_progress.h"
#include "predict_stream.h"
#include "predict_support.h"

#include <fno_engine/tiled_runner.h>

namespace fno {

namespace {

using detail::check_normalizer_grid;
using detail::grid_text;
using detail::has_prefix;
using detail::json_array;
using detail::load_normalizers;
using detail::number_attr;
using detail::parse_progress;
using detail::pick_device;
using detail::PredictProgress;
using detail::stream_tile_calls;
using detail::text_attr;
using detail::with_prefix;

// The engine's refusal of a budget, in fno_predict's flags.
[[noreturn]] void reword(const ForwardBudgetError& e) {
  using L = ForwardBudgetError::Limit;
  if (e.limit() == L::kTileRows) throw PredictUsageError("--tile-rows: " + e.detail());
  throw std::runtime_error(
      (e.limit() == L::kGpuMemory ? "--gpu-memory-limit " : "--host-memory-limit ") + e.detail());
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// A model's settings alone (--model-config): a config file in fno_train's
// keys, of which the model: section matters; without data.train_file it
// still parses. A state dict carries no normalizers: none apply.
RunConfig load_model_config(const std::string& path) {
  RunConfig cfg;
  try {
    cfg = load_config(path);
  } catch (const ConfigError& e) {
    if (std::string(e.what()).find("data.train_file") == std::string::npos) throw;
    cfg = load_config(path, {"data.train_file=" + path});
  }
  cfg.data.encode_input = false;
  cfg.data.encode_output = false;
  return cfg;
}

// Samples [first, first + count) of the input (and the truth), read whole by
// the loaders; a range past the file's end is a PredictUsageError.
std::pair<torch::Tensor, torch::Tensor> load_range(const PredictOptions& o,
                                                   const data::LoadOptions& lo, bool truth) {
  // The loaders warn on std::cerr when a file holds fewer samples than asked;
  // that case is an error here, said in one line, so their warnings are held
  // back and passed on only when the range fits.
  std::ostringstream warnings;
  data::FieldPairs pairs;
  {
    struct Redirect {
      std::streambuf* old;
      explicit Redirect(std::streambuf* to) : old(std::cerr.rdbuf(to)) {}
      ~Redirect() { std::cerr.rdbuf(old); }
    } redirect(warnings.rdbuf());
    pairs = data::load_darcy(o.input, lo);
  }
  const int64_t held = pairs.x.size(0);
  const bool past = o.first >= held || (o.count > 0 && o.first + o.count > held);
  if (!past) std::cerr << warnings.str();
  if (past) {
    throw PredictUsageError(o.input + ": --samples " + std::to_string(o.first) + ":" +
                            (o.count > 0 ? std::to_string(o.count) : std::string()) +
                            " asks past the " + std::to_string(held) + " samples it holds");
  }
  const int64_t n = o.count > 0 ? o.count : held - o.first;
  auto x = pairs.x.narrow(0, o.first, n);
  auto y = truth ? pairs.y.narrow(0, o.first, n) : torch::Tensor();
  return {x, y};
}

}  // namespace

std::string predict_summary_path(const std::string& out) {
  const auto slash = out.find_last_of('/');
  const auto dot = out.find_last_of('.');
  const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  return (ext ? out.substr(0, dot) : out) + ".summary.json";
}

namespace {

// One fno_predict run, its steps in predict()'s order; what a step finds is
// kept for the next.
class PredictRun {
 public:
  explicit PredictRun(const PredictOptions& options)
      : o(options), summary_path(predict_summary_path(options.out)) {}

  // The request alone: required options, ranges, the output not there yet.
  void check_request() {
    if (o.run_dir.empty()) throw PredictUsageError("--model RUN_DIR is required");
    if (o.input.empty()) throw PredictUsageError("--input FILE is required");
    if (o.out.empty()) throw PredictUsageError("--out FILE.h5 is required");
    if (o.first < 0)
      throw PredictUsageError("--samples: FIRST must be >= 0, got " + std::to_string(o.first));
    if (o.count == 0 || o.count < -1) {
      throw PredictUsageError("--samples: COUNT must be >= 1, got " + std::to_string(o.count));
    }
    if (o.batch_size < 0) {
      throw PredictUsageError("--batch-size must be >= 1, got " + std::to_string(o.batch_size));
    }
    if (o.tile_rows < 0) {
      throw PredictUsageError("--tile-rows must be >= 1, got " + std::to_string(o.tile_rows));
    }
    if (o.host_memory_limit < 0 || o.gpu_memory_limit < 0) {
      throw PredictUsageError("a memory limit must be >= 0");
    }
    if (!o.overwrite) {
      for (const auto& path : {o.out, summary_path}) {
        if (exists(path)) {
          throw PredictUsageError(path + " exists; choose another --out or pass --overwrite");
        }
      }
    }
    if (o.out == o.input) throw PredictUsageError(o.out + ": --out is the --input file");
    progress_mode = parse_progress(o.progress);
  }

  // The model's settings (a run's config.yaml, or --model-config), its
  // weights and the run's normalizers; the precision and the device.
  void load_model() {
    // The run, or a state dict and the model's settings (--model-config).
    state_dict_model = !o.model_config.empty();
    cfg_path = state_dict_model ? o.model_config : o.run_dir + "/config.yaml";
    if (state_dict_model && !o.checkpoint.empty()) {
      throw PredictUsageError("--checkpoint: with --model-config, --model names the weights");
    }
    if (!exists(cfg_path)) {
      throw std::runtime_error(state_dict_model
                                   ? cfg_path + ": no such file"
                                   : o.run_dir + ": not a run directory (no config.yaml)");
    }
    // (a model's settings need no training data: data.train_file is filled in
    // when the file leaves it out)
    cfg = state_dict_model ? load_model_config(cfg_path) : load_config(cfg_path);
    if (cfg.data.problem == DataProblem::kNavierStokes) ns.emplace(cfg);
    precision = o.precision.empty() ? cfg.training.precision : parse_precision(o.precision);
    device = pick_device(o.device);
    matmul.emplace(precision);

    // The weights.
    weights_path = state_dict_model
                       ? o.run_dir
                       : (o.checkpoint.empty() ? o.run_dir + "/model.pt" : o.checkpoint);
    if (!exists(weights_path)) {
      throw std::runtime_error(weights_path + ": no such file" +
                               (o.checkpoint.empty() && !state_dict_model
                                    ? " (the run has not finished; name a "
                                      "checkpoint with --checkpoint)"
                                    : ""));
    }
    if (state_dict_model && std::filesystem::is_directory(weights_path)) {
      throw PredictUsageError("--model " + weights_path +
                              ": with --model-config, --model names a state dict file");
    }
    const TensorDict weights_file = load_tensor_dict(weights_path);
    const bool is_checkpoint = has_prefix(weights_file, "model.");
    model = FNO(FNOOptions(cfg.model).compute_dtype(compute_dtype(precision)));
    try {
      load_state_dict(*model, is_checkpoint ? with_prefix(weights_file, "model.") : weights_file);
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      throw std::runtime_error(weights_path + " does not match " + cfg_path +
                               "'s model: " + msg.substr(0, msg.find('\n')));
    }
    model->to(device);
    model->eval();
    r.normalizers = load_normalizers(cfg, o.run_dir, weights_file, weights_path, in_norm, out_norm);
  }

  // The inputs (read whole, or opened for streaming) and the truth, checked
  // against the model.
  void open_inputs() {
    // The inputs (and the truth): the loaders read x alone when y_key names x.
    truth = !o.y_key.empty();
    if (ns) return open_ns_inputs();
    lo.x_key(o.x_key.empty() ? cfg.data.x_key : o.x_key);
    lo.y_key(truth ? o.y_key : lo.x_key());
    if (!truth && lo.x_key().empty()) {
      lo.x_key(data::detect_format(o.input) == data::FileFormat::kHdf5 ? "coeff" : "x");
      lo.y_key(lo.x_key());
    }
    if (o.count > 0) lo.n_samples(o.first + o.count);
    // An HDF5 input without truth can be streamed: its shape is read first.
    if (!truth && data::detect_format(o.input) == data::FileFormat::kHdf5) {
      reader = std::make_unique<data::Hdf5SlabReader>(o.input, lo.x_key(), lo.x_layout());
    }
    if (reader) {
      x_shape = reader->shape();
      const int64_t held = x_shape[0];
      if (o.first >= held || (o.count > 0 && o.first + o.count > held)) {
        throw PredictUsageError(o.input + ": --samples " + std::to_string(o.first) + ":" +
                                (o.count > 0 ? std::to_string(o.count) : std::string()) +
                                " asks past the " + std::to_string(held) + " samples it holds");
      }
      n = o.count > 0 ? o.count : held - o.first;
      x_shape[0] = n;
    } else {
      std::tie(x, y) = load_range(o, lo, truth);
      n = x.size(0);
      x_shape = x.sizes().vec();
    }
    const auto& mo = cfg.model;
    n_dim = static_cast<int64_t>(mo.n_modes().size());
    xk = lo.x_key().empty() ? "x" : lo.x_key();
    const auto x_dim = static_cast<int64_t>(x_shape.size());
    if (x_dim - 2 != n_dim) {
      throw std::runtime_error(o.input + ": '" + xk + "' has " + std::to_string(x_dim - 2) +
                               " spatial dims; the model (" + cfg_path + ") has " +
                               std::to_string(n_dim));
    }
    if (x_shape[1] != mo.in_channels() || (truth && y.size(1) != mo.out_channels())) {
      throw std::runtime_error(o.input + ": '" + xk + "' gives " + std::to_string(x_shape[1]) +
                               " input channel(s); the model takes " +
                               std::to_string(mo.in_channels()) + " in and gives " +
                               std::to_string(mo.out_channels()) + " out");
    }
    grid_v.assign(x_shape.begin() + 2, x_shape.end());
    const at::IntArrayRef grid(grid_v);
    check_grid();
    check_normalizer_grid(in_norm, "input", grid, o.input);
    check_normalizer_grid(out_norm, "output", grid, o.input);
    r.n_samples = n;
    r.grid.assign(grid.begin(), grid.end());
  }

  // A Navier-Stokes run's records: its first t_in records in, the truth after
  // them; the model's grid is (R, R) (recurrent) or (R, R, t_out) (space-time).
  void open_ns_inputs() {
    xk = o.x_key.empty() ? (cfg.data.x_key.empty() ? "u" : cfg.data.x_key) : o.x_key;
    ns->load(o, xk, o.y_key);
    x = ns->x;
    y = ns->y;
    n = x.size(0);
    x_shape = ns->model_input_shape();
    n_dim = static_cast<int64_t>(cfg.model.n_modes().size());
    if (static_cast<int64_t>(x_shape.size()) - 2 != n_dim ||
        x_shape[1] != cfg.model.in_channels()) {
      throw std::runtime_error(o.input + ": '" + xk + "' gives inputs of shape " +
                               grid_text(x_shape) + " (t_in " + std::to_string(ns->t_in()) +
                               " records); the model (" + cfg_path + ") takes " +
                               std::to_string(cfg.model.in_channels()) + " channels over " +
                               std::to_string(n_dim) + " dims");
    }
    grid_v.assign(x_shape.begin() + 2, x_shape.end());
    check_grid();
    check_normalizer_grid(in_norm, "input", x.sizes().slice(2), o.input);
    check_normalizer_grid(out_norm, "output", grid_v, o.input);
    r.n_samples = n;
    r.grid = grid_v;
  }

  // A grid smaller than the model's n_modes (which count both signs of a
  // dim's frequencies) would drop some of the trained spectrum.
  void check_grid() const {
    const auto& mo = cfg.model;
    const at::IntArrayRef grid(grid_v);
    for (int64_t i = 0; i < n_dim; ++i) {
      if (grid[i] < mo.n_modes()[i]) {
        throw std::runtime_error(o.input + ": grid " + grid_text(grid) +
                                 " is smaller than the model's n_modes (" +
                                 grid_text(mo.n_modes()) + " modes, half of each sign)");
      }
    }
  }

  // The plan: whole grid in batches or micro-batches, tiles, or streamed.
  void choose() {
    const auto& mo = cfg.model;
    const at::IntArrayRef grid(grid_v);
    // (the one forward under a plan, which the trainer's evaluation takes too)
    batch = std::min<int64_t>(
        n, o.batch_size > 0 ? o.batch_size
                            : (cfg.data.tests.empty() ? cfg.data.batch_size
                                                      : cfg.data.tests.front().batch_size));
    elem = c10::elementSize(compute_dtype(precision));
    // Streamed (an HDF5 input without truth that needs tiles, or whose arrays
    // do not fit the host budget), or the arrays whole.
    points = 1;
    for (const auto v : grid) points *= v;
    const int64_t whole_host =
        n * points * (mo.in_channels() + (truth ? mo.out_channels() : 0)) * 4 +
        2 * batch * points * mo.out_channels() * 4 +
        (device.is_cpu() ? whole_grid_forward_bytes(model, x_shape, batch, elem) : 0);
    const bool host_short = o.host_memory_limit > 0 && whole_host > o.host_memory_limit;
    stream = reader && (o.tile_rows > 0 || host_short);
    if (reader && !stream && device.is_cuda() && o.gpu_memory_limit > 0) {
      // One sample's whole grid over the GPU budget: tiles, streamed.
      stream = whole_grid_forward_bytes(model, x_shape, 1, elem) > o.gpu_memory_limit;
    }
    if (!stream) {
      if (host_short) {
        throw std::runtime_error(
            "--host-memory-limit " + offload::format_bytes(o.host_memory_limit) +
            ": the input and output held whole need about " + offload::format_bytes(whole_host) +
            (truth ? " (errors against the truth, --y-key, are computed on whole arrays)"
                   : " (a .pt input is read whole; HDF5 inputs are streamed)"));
      }
      if (reader) {
        reader.reset();
        std::tie(x, y) = load_range(o, lo, truth);
      }
    }
    // The plan; a streamed one counts the reader's chunk cache and the writer's (1 MiB).
    auto shape = x_shape;
    shape[0] = stream ? 1 : batch;
    const auto budget = ForwardBudget()
                            .gpu_memory_limit(o.gpu_memory_limit)
                            .host_memory_limit(o.host_memory_limit)
                            .tile_rows(o.tile_rows);
    try {
      if (stream) {
        streamed = choose_streamed_plan(model, shape, budget, device,
                                        reader->cache_bytes() + (int64_t{1} << 20));
        streamed->text += streamed_graphs_text(parse_cuda_graphs(o.cuda_graphs));
      } else {
        plan = choose_forward_plan(model, shape, budget, device, elem);
        graphs = use_forward_graphs(model, *plan, parse_cuda_graphs(o.cuda_graphs), device);
      }
    } catch (const ForwardBudgetError& e) {
      reword(e);
    }
    r.plan = device.str() + ", " + to_string(precision) + ", " + std::to_string(n) +
             " sample(s) at " + grid_text(grid) + ": " + (stream ? streamed->text : plan->text);
    if (!stream && plan->tiled) tiled = std::make_unique<TiledRunner>(model, nullptr);
    in_norm.to(device);
    out_norm.to(device);
  }

  // The forward of every sample into the output file, and the errors.
  void run_forward() {
    const auto& mo = cfg.model;
    const at::IntArrayRef grid(grid_v);
    // The output: the prediction (N, *S) for one output channel, else (N, C, *S);
    // Navier-Stokes: the predicted records (N, t_out, R, R).
    std::vector<int64_t> pred_shape{n};
    if (ns) {
      pred_shape = {n, ns->t_out(), x.size(2), x.size(3)};
    } else {
      if (mo.out_channels() > 1) pred_shape.push_back(mo.out_channels());
      pred_shape.insert(pred_shape.end(), grid.begin(), grid.end());
    }
    std::vector<std::pair<std::string, std::vector<int64_t>>> sets{{"pred", pred_shape}};
    if (truth) {
      sets.push_back({"l2", {n, 1}});
      sets.push_back({"h1", {n, 1}});
      if (ns) sets.push_back({"l2_per_record", {n, ns->t_out()}});
    }
    // (--overwrite: the new file is made whole beside the old one, then renamed
    // over it, since the writer itself never writes over a file)
    replacing = o.overwrite && std::filesystem::exists(o.out);
    written = replacing ? o.out + ".replacing." + std::to_string(::getpid()) : o.out;
    // No deflate past 64 MiB of output: its single thread would bound the run.
    data::SampleWriterOptions wo;
    wo.compress(n * points * mo.out_channels() * 4 <= (int64_t{64} << 20));
    if (stream) {
      // Chunks of bands of rows that the tiles' writes cover whole (at most ~1 MiB).
      const int64_t row_bytes = points / grid[0] * mo.out_channels() * 4;
      int64_t band = 1;
      while (band * 2 * row_bytes <= (int64_t{1} << 20) &&
             streamed->plan.tile_rows % (band * 2) == 0)
        band *= 2;
      wo.band_rows(band).band_dim(mo.out_channels() > 1 ? 2 : 1);
    }
    writer = std::make_unique<data::Hdf5SampleWriter>(written, sets, wo);
    // The pinned stores' copy engine, and the GPU's peak memory over the forward.
    // (pinned stores: two tiles in flight to the host at most, as the plan counts)
    auto oo = offload::OffloadOptions().host_memory_limit(o.host_memory_limit);
    if (stream) {
      std::vector<int64_t> one = x_shape;
      one[0] = 1;
      const int64_t tile = tiled_sizes(model, one).tile_hidden(streamed->plan.tile_rows);
      oo.max_inflight_bytes(std::max<int64_t>(2 * tile, int64_t{16} << 20));
    }
    offload::Offloader offloader(oo);
    offloader.begin_step();
    PredictProgress progress(progress_mode, o.progress_every);
    const auto wall0 = std::chrono::steady_clock::now();
    if (stream) {
      progress.stream(n, stream_tile_calls(streamed->plan, grid[0], mo.n_layers()));
      const auto t = detail::predict_streamed(model, *streamed, *reader, o.first, n, device,
                                              in_norm, out_norm, *writer, &offloader,
                                              [&progress](int64_t i) { progress.tile(i); });
      r.read_s = t.read_s;
      r.write_s = t.write_s;
      r.read_wait_s = t.read_wait_s;
      r.write_wait_s = t.write_wait_s;
    }
    for (int64_t first = 0; !stream && first < n; first += plan->micro) {
      const int64_t b = std::min(plan->micro, n - first);
      const auto xb = x.narrow(0, first, b).to(device);
      if (device.is_cuda()) torch::cuda::synchronize(device.index());
      const auto t0 = std::chrono::steady_clock::now();
      const auto out = forward(xb);
      if (device.is_cuda()) torch::cuda::synchronize(device.index());
      r.forward_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (ns) {
        writer->write("pred", first, ns->trajectory(out).contiguous());
      } else {
        writer->write("pred", first, mo.out_channels() > 1 ? out : out.squeeze(1));
      }
      if (truth) write_errors(first, out, y.narrow(0, first, b).to(device));
      progress.samples(first + b, n);
    }
    progress.clear();
    if (graphs) r.plan += "; " + graphs->summary();
    if (device.is_cuda()) torch::cuda::synchronize();
    r.forward_wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    r.gpu_peak_bytes = device.is_cuda() ? offloader.end_step().peak_allocated : 0;
  }

  // Samples [first, first + b)'s errors against the truth, into the output and r.
  // out, yb: [b, Cout, *S] decoded (Navier-Stokes: the model's output layout)
  void write_errors(int64_t first, const torch::Tensor& out, const torch::Tensor& yb) {
    const int64_t b = out.size(0);
    torch::Tensor v2, v1;
    if (ns) {
      const auto e = ns->errors(out, yb);
      v2 = e.l2;
      v1 = e.h1;
      writer->write("l2_per_record", first, e.per_record);
      if (!per_record_sum.defined()) per_record_sum = torch::zeros({ns->t_out()}, torch::kDouble);
      per_record_sum += e.per_record.sum(0);
    } else {
      const auto l2 = relative_loss(LossName::kL2, n_dim);
      const auto h1 = relative_loss(LossName::kH1, n_dim);
      std::vector<torch::Tensor> e2, e1;
      for (int64_t i = 0; i < b; ++i) {
        e2.push_back(l2(out.narrow(0, i, 1), yb.narrow(0, i, 1)).to(torch::kDouble).reshape({1}));
        e1.push_back(h1(out.narrow(0, i, 1), yb.narrow(0, i, 1)).to(torch::kDouble).reshape({1}));
      }
      v2 = torch::cat(e2).cpu();
      v1 = torch::cat(e1).cpu();
    }
    writer->write("l2", first, v2.view({b, 1}));
    writer->write("h1", first, v1.view({b, 1}));
    for (int64_t i = 0; i < b; ++i) {
      r.l2.push_back(v2[i].item<double>());
      r.h1.push_back(v1[i].item<double>());
    }
  }

  // The output's attributes, the file renamed into place, the summary.
  PredictResult finish() {
    const at::IntArrayRef grid(grid_v);
    for (const double v : r.l2) r.mean_l2 += v / static_cast<double>(n);
    for (const double v : r.h1) r.mean_h1 += v / static_cast<double>(n);
    if (per_record_sum.defined()) {
      for (int64_t t = 0; t < per_record_sum.numel(); ++t)
        r.l2_per_record.push_back(per_record_sum[t].item<double>() / static_cast<double>(n));
    }

    std::vector<data::Attribute> attrs{
        text_attr("model", o.run_dir),
        text_attr("weights", weights_path),
        text_attr("normalizers", r.normalizers),
        text_attr("input", o.input),
        text_attr("x_key", xk),
        text_attr("y_key", o.y_key),
        number_attr("first", static_cast<double>(o.first)),
        number_attr("count", static_cast<double>(n)),
        text_attr("precision", to_string(precision)),
        text_attr("device", device.str()),
        text_attr("plan", r.plan),
        number_attr("gpu_peak_bytes", static_cast<double>(r.gpu_peak_bytes)),
        number_attr("forward_wall_seconds", r.forward_wall_s),
        number_attr("gpu_memory_limit", static_cast<double>(o.gpu_memory_limit)),
        number_attr("host_memory_limit", static_cast<double>(o.host_memory_limit)),
        text_attr("config", cfg.resolved_yaml)};
    if (truth) {
      attrs.push_back(number_attr("mean_l2", r.mean_l2));
      attrs.push_back(number_attr("mean_h1", r.mean_h1));
    }
    if (ns) {
      attrs.push_back(text_attr("problem", to_string(cfg.data.problem)));
      attrs.push_back(text_attr("ns_mode", to_string(cfg.data.ns_mode)));
      attrs.push_back(number_attr("t_in", static_cast<double>(ns->t_in())));
      attrs.push_back(number_attr("t_out", static_cast<double>(ns->t_out())));
    }
    // The summary is written (atomically) once the output is renamed into place.
    std::string summary_text;
    if (truth) {
      json::Object s;
      s.str("model", o.run_dir)
          .str("weights", weights_path)
          .str("input", o.input)
          .str("output", o.out)
          .integer("first", o.first)
          .integer("n_samples", n)
          .str("grid", grid_text(grid))
          .str("precision", to_string(precision))
          .str("plan", r.plan)
          .num("forward_wall_seconds", r.forward_wall_s)
          .num("read_seconds", r.read_s)
          .num("read_wait_seconds", r.read_wait_s)
          .num("write_seconds", r.write_s)
          .num("write_wait_seconds", r.write_wait_s)
          .num("mean_l2", r.mean_l2)
          .num("mean_h1", r.mean_h1)
          .raw("l2", json_array(r.l2))
          .raw("h1", json_array(r.h1))
          .raw("forward_seconds", json_array(r.forward_seconds));
      if (ns) s.raw("l2_per_record", json_array(r.l2_per_record));
      summary_text = s.text() + "\n";
    }
    writer->commit(attrs);
    if (replacing && std::rename(written.c_str(), o.out.c_str()) != 0) {
      const int err = errno;
      std::remove(written.c_str());
      throw std::runtime_error(o.out + ": cannot replace it: " + std::strerror(err));
    }
    r.out = o.out;
    if (!truth && o.overwrite) std::remove(summary_path.c_str());  // not this output's
    if (truth) {
      try {
        write_file_atomic(summary_path, summary_text.data(), summary_text.size());
      } catch (...) {
        std::remove(o.out.c_str());  // no output without its summary
        throw;
      }
      r.summary = summary_path;
    }
    return r;
  }

 private:
  // The model's forward of a batch, without gradients, decoded.
  // xb: [b, Cin, *S] -> [b, Cout, *S] (Navier-Stokes: [b, t_in, R, R] -> the model's output layout)
  torch::Tensor forward(const torch::Tensor& xb) {
    torch::NoGradGuard no_grad;
    auto in = in_norm.fitted() ? in_norm.transform(xb) : xb;
    // in: [b, Cin, *S] -> [b, Cout, *S]
    const StepModel model_forward = [this](const torch::Tensor& in) {
      return forward_under_plan(model, *plan, in, tiled.get(), graphs.get());
    };
    // (Navier-Stokes: the rollout, or the space-time model over the records repeated in time)
    auto out = ns ? ns->forward(model_forward, in) : model_forward(in);
    out = out.to(torch::kFloat);
    return out_norm.fitted() ? out_norm.inverse_transform(out) : out;
  }

  const PredictOptions& o;
  const std::string summary_path;
  PredictResult r;
  // load_model
  bool state_dict_model = false;
  std::string cfg_path, weights_path;
  RunConfig cfg;
  Precision precision = Precision::kFP32;
  torch::Device device{torch::kCPU};
  std::optional<MatmulPrecisionGuard> matmul;
  FNO model{nullptr};
  data::UnitGaussianNormalizer in_norm, out_norm;
  Progress progress_mode = Progress::kAuto;
  std::optional<detail::NsPrediction> ns;  // a Navier-Stokes run
  // open_inputs
  bool truth = false;
  data::LoadOptions lo;
  std::unique_ptr<data::Hdf5SlabReader> reader;
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
  bool replacing = false;
  std::string written;
  std::unique_ptr<data::Hdf5SampleWriter> writer;
  torch::Tensor per_record_sum;  // Navier-Stokes: [t_out] float64, over the samples
};

}  // namespace

PredictResult predict(const PredictOptions& o) {
  // A run trained on benchmark data (data.format) reads the benchmark's files.
  if (auto r = detail::predict_benchmark(o)) return *r;
  PredictRun run(o);
  run.check_request();
  run.load_model();
  run.open_inputs();
  run.choose();
  run.run_forward();
  return run.finish();
}

}  // namespace fno
