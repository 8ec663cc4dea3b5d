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
#include <fno_train/distributed.h>
#include <fno_train/train_step.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <tuple>

#include "json.h"
#include "predict_benchmark.h"
#include "predict_run.h"
#include "predict_stream.h"
#include "predict_support.h"

namespace fno {

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::string predict_summary_path(const std::string& out) {
  const auto slash = out.find_last_of('/');
  const auto dot = out.find_last_of('.');
  const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  return (ext ? out.substr(0, dot) : out) + ".summary.json";
}

namespace detail {

PredictRun::PredictRun(const PredictOptions& options)
    : o(options), summary_path(predict_summary_path(options.out)) {
  input_paths = o.inputs.empty() ? std::vector<std::string>{o.input} : o.inputs;
  for (const auto& p : input_paths) inputs_text += (inputs_text.empty() ? "" : ", ") + p;
}

void PredictRun::check_request() {
  if (o.run_dir.empty()) throw PredictUsageError("--model RUN_DIR is required");
  if (!o.input.empty() && !o.inputs.empty()) {
    throw PredictUsageError("give the inputs as input or as inputs, not both");
  }
  for (const auto& path : input_paths) {
    if (path.empty()) throw PredictUsageError("--input FILE is required");
  }
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
  for (const auto& path : input_paths) {
    if (o.out == path) throw PredictUsageError(o.out + ": --out is an --input file");
  }
  progress_mode = parse_progress(o.progress);
}

void PredictRun::choose() {
  const auto& mo = cfg.model;
  const at::IntArrayRef grid(grid_v);
  // (the one forward under a plan, which the trainer's evaluation takes too)
  batch = std::min<int64_t>(
      n, o.batch_size > 0
             ? o.batch_size
             : (cfg.data.tests.empty() ? cfg.data.batch_size : cfg.data.tests.front().batch_size));
  elem = c10::elementSize(compute_dtype(precision));
  // Streamed (HDF5 inputs that need tiles, or whose arrays do not fit the
  // host budget), or the arrays whole.
  points = 1;
  for (const auto v : grid) points *= v;
  const bool streamable = files && files->streamable();
  const int64_t whole_host =
      n * points * (mo.in_channels() + (truth ? mo.out_channels() : 0)) * 4 +
      2 * batch * points * mo.out_channels() * 4 +
      (device.is_cpu() ? whole_grid_forward_bytes(model, x_shape, batch, elem) : 0);
  const bool host_short = o.host_memory_limit > 0 && whole_host > o.host_memory_limit;
  stream = streamable && (o.tile_rows > 0 || host_short);
  if (streamable && !stream && device.is_cuda() && o.gpu_memory_limit > 0) {
    // One sample's whole grid over the GPU budget: tiles, streamed.
    stream = whole_grid_forward_bytes(model, x_shape, 1, elem) > o.gpu_memory_limit;
  }
  if (!stream) {
    if (host_short) {
      throw std::runtime_error("--host-memory-limit " + offload::format_bytes(o.host_memory_limit) +
                               ": the input and output held whole need about " +
                               offload::format_bytes(whole_host) +
                               (ns ? " (Navier-Stokes inputs are held in memory)"
                                   : " (a .pt input is read whole; HDF5 inputs are streamed)"));
    }
    if (files) {  // (the readers' caches go; the range is read whole)
      files->close();
      std::tie(x, y) = files->load(o.first, n);
    }
  }
  // The plan; a streamed one counts the readers' chunk caches (the input's,
  // and the truth's), the writer's (1 MiB), and the errors' work on the truth.
  auto shape = x_shape;
  shape[0] = stream ? 1 : batch;
  const auto budget = ForwardBudget()
                          .gpu_memory_limit(o.gpu_memory_limit)
                          .host_memory_limit(o.host_memory_limit)
                          .tile_rows(o.tile_rows);
  try {
    if (stream) {
      const int64_t errors_bytes =
          truth ? StreamedErrors::work_bytes(points / grid[0] * mo.out_channels()) : 0;
      streamed =
          choose_streamed_plan(model, shape, budget, device,
                               files->cache_bytes(truth) + (int64_t{1} << 20) + errors_bytes);
      streamed->text += streamed_graphs_text(parse_cuda_graphs(o.cuda_graphs));
    } else {
      plan = choose_forward_plan(model, shape, budget, device, elem);
      graphs = use_forward_graphs(model, *plan, parse_cuda_graphs(o.cuda_graphs), device);
    }
  } catch (const ForwardBudgetError& e) {
    reword_budget(e);
  }
  r.plan = device.str() + ", " + to_string(precision) + ", " + std::to_string(n) +
           " sample(s) at " + grid_text(grid) + ": " + (stream ? streamed->text : plan->text);
  if (!stream && plan->tiled) tiled = std::make_unique<TiledRunner>(model, nullptr);
  in_norm.to(device);
  out_norm.to(device);
}

void PredictRun::run_forward() {
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
  // No deflate past 64 MiB of output: its single thread would bound the run.
  // (--overwrite: the new file is made whole beside the old one, then renamed
  // over it.)
  auto wo = data::SampleWriterOptions().replace(o.overwrite);
  wo.compress(n * points * mo.out_channels() * 4 <= (int64_t{64} << 20));
  if (stream) {
    // Chunks of bands of rows that the tiles' writes cover whole (at most ~1 MiB).
    const int64_t row_bytes = points / grid[0] * mo.out_channels() * 4;
    int64_t band = 1;
    while (band * 2 * row_bytes <= (int64_t{1} << 20) && streamed->plan.tile_rows % (band * 2) == 0)
      band *= 2;
    wo.band_rows(band).band_dim(mo.out_channels() > 1 ? 2 : 1);
  }
  writer = std::make_unique<data::Hdf5SampleWriter>(o.out, sets, wo);
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
  if (stream) run_streamed(progress, offloader);
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
  // (streamed: the errors, added up tile by tile, written once the stream is done)
  if (stream && truth) add_errors(0, streamed_l2, streamed_h1);
}

// Every sample streamed tile by tile, and with the truth each sample's errors
// from the truth's rows beside the output's (streamed_l2, streamed_h1).
void PredictRun::run_streamed(PredictProgress& progress, offload::Offloader& offloader) {
  const auto& mo = cfg.model;
  progress.stream(n, stream_tile_calls(streamed->plan, grid_v[0], mo.n_layers()));
  std::vector<StreamedErrors::Values> errors;
  const auto t = predict_streamed(
      model, *streamed, *files, o.first, n, device, in_norm, out_norm, *writer, &offloader,
      [&progress](int64_t i) { progress.tile(i); }, truth ? &errors : nullptr);
  r.read_s = t.read_s;
  r.write_s = t.write_s;
  r.read_wait_s = t.read_wait_s;
  r.write_wait_s = t.write_wait_s;
  if (!truth) return;
  streamed_l2 = torch::empty({n}, torch::kDouble);
  streamed_h1 = torch::empty({n}, torch::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    streamed_l2[i] = errors[static_cast<size_t>(i)].l2;
    streamed_h1[i] = errors[static_cast<size_t>(i)].h1;
  }
}

// Samples [first, first + b)'s errors against the truth, into the output and r.
// out, yb: [b, Cout, *S] decoded (Navier-Stokes: the model's output layout)
void PredictRun::write_errors(int64_t first, const torch::Tensor& out, const torch::Tensor& yb) {
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
  add_errors(first, v2, v1);
}

// l2, h1: [b] float64 on the CPU, samples [first, first + b)
void PredictRun::add_errors(int64_t first, const torch::Tensor& l2, const torch::Tensor& h1) {
  const int64_t b = l2.size(0);
  writer->write("l2", first, l2.view({b, 1}));
  writer->write("h1", first, h1.view({b, 1}));
  for (int64_t i = 0; i < b; ++i) {
    r.l2.push_back(l2[i].item<double>());
    r.h1.push_back(h1[i].item<double>());
  }
}

PredictResult PredictRun::finish() {
  const at::IntArrayRef grid(grid_v);
  for (const double v : r.l2) r.mean_l2 += v / static_cast<double>(n);
  for (const double v : r.h1) r.mean_h1 += v / static_cast<double>(n);
  if (per_record_sum.defined()) {
    for (int64_t t = 0; t < per_record_sum.numel(); ++t)
      r.l2_per_record.push_back(per_record_sum[t].item<double>() / static_cast<double>(n));
  }
  // Every input file, in order: "input" (one per line) and "input_files".
  std::string input_lines;
  for (const auto& p : input_paths) input_lines += (input_lines.empty() ? "" : "\n") + p;
  std::vector<data::Attribute> attrs{
      text_attr("model", o.run_dir),
      text_attr("weights", weights_path),
      text_attr("normalizers", r.normalizers),
      text_attr("input", input_lines),
      number_attr("input_files", static_cast<double>(input_paths.size())),
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
    std::string inputs_json;
    for (const auto& p : input_paths) {
      inputs_json += (inputs_json.empty() ? "\"" : ", \"") + json::escape(p) + "\"";
    }
    json::Object s;
    s.str("model", o.run_dir)
        .str("weights", weights_path)
        .str("input", input_paths[0])
        .raw("inputs", "[" + inputs_json + "]")
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

// The model's forward of a batch, without gradients, decoded.
// xb: [b, Cin, *S] -> [b, Cout, *S] (Navier-Stokes: [b, t_in, R, R] -> the model's output layout)
torch::Tensor PredictRun::forward(const torch::Tensor& xb) {
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

}  // namespace detail

PredictResult predict(const PredictOptions& o) {
  // Under torchrun: each sample's rows over domain_parallel ranks.
  if (o.domain_parallel > 1 || o.domain_parallel < 0) return detail::predict_domain(o);
  if (const auto env = dist::launch_env(); env && env->world_size > 1) {
    if (o.domain_parallel == 1) return detail::predict_domain(o);
    throw PredictUsageError("under torchrun (WORLD_SIZE " + std::to_string(env->world_size) +
                            "), give --domain-parallel N: the ranks that share each sample");
  }
  // A run trained on benchmark data (data.format) reads the benchmark's files.
  if (auto r = detail::predict_benchmark(o)) return *r;
  detail::PredictRun run(o);
  run.check_request();
  run.load_model();
  run.open_inputs();
  run.choose();
  run.run_forward();
  return run.finish();
}

}  // namespace fno
