// fno_predict on a run trained on benchmark data (predict_benchmark.h): the
// benchmark's windows read as fno_train reads its test sets, the model's
// one-step predictions and, with --rollout, each trajectory rolled out
// (benchmark_run.h's rollout, as fno_train's benchmark_eval.cpp), the
// benchmark's metric per field in the summary. Under --domain-parallel N
// (predict_benchmark_domain) each rank keeps its band of rows of the split's
// windows (BenchmarkSet::select_rows: read by hyperslab),
// runs the tiled forward on it, and rolls out on its rows; the metric adds
// the band's grid sums over the ranks, and the ranks write their rows of the
// output in turn into one file that rank 0 makes and commits. The W / N
// sample groups split the windows, and the trajectories rolled out, in
// contiguous runs; their metric sums are added over the groups.
#include "predict_benchmark.h"

#include <fno/fno.h>
#include <fno/precision.h>
#include <fno/serialize.h>
#include <fno/tiled.h>
#include <fno_engine/forward_plan.h>
#include <fno_engine/tiled_runner.h>
#include <fno_train/config.h>
#include <fno_train/domain.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "benchmark_run.h"
#include "json.h"
#include "predict_run.h"
#include "predict_stream.h"
#include "predict_support.h"

namespace fno::detail {

namespace {

// "a, b, c": the channels' names as one attribute.
std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The options that do not apply to a benchmark run, refused by name.
void check_request(const PredictOptions& o, const std::string& summary) {
  if (!o.inputs.empty()) {
    throw PredictUsageError(
        "--input: one benchmark file or folder (a run trained on benchmark data reads its split "
        "from it), not " +
        std::to_string(o.inputs.size()));
  }
  if (o.input.empty()) throw PredictUsageError("--input FILE is required");
  if (o.out.empty()) throw PredictUsageError("--out FILE.h5 is required");
  const std::string why = ": not used with a run trained on benchmark data (data.format)";
  if (!o.x_key.empty())
    throw PredictUsageError("--x-key" + why + "; its data.fields name the inputs");
  if (!o.y_key.empty()) throw PredictUsageError("--y-key" + why + "; the files hold the truth");
  if (o.tile_rows > 0) throw PredictUsageError("--tile-rows" + why);
  if (o.gpu_memory_limit > 0 || o.host_memory_limit > 0) {
    throw PredictUsageError("--gpu-memory-limit and --host-memory-limit" + why);
  }
  if (o.first < 0 || o.count == 0 || o.count < -1) {
    throw PredictUsageError("--samples: FIRST must be >= 0 and COUNT >= 1");
  }
  if (!o.overwrite) {
    for (const auto& path : {o.out, summary}) {
      if (std::filesystem::exists(path)) {
        throw PredictUsageError(path + " exists; choose another --out or pass --overwrite");
      }
    }
  }
  if (o.out == o.input) throw PredictUsageError(o.out + ": --out is the --input file");
}

// One prediction of a benchmark run, its steps in predict_benchmark()'s order;
// what a step finds is kept for the next.
class BenchmarkPrediction {
 public:
  BenchmarkPrediction(const PredictOptions& options, RunConfig config, std::string config_path,
                      std::shared_ptr<dist::Group> world = nullptr)
      : o(options),
        cfg(std::move(config)),
        cfg_path(std::move(config_path)),
        world(std::move(world)) {}

  // Domain parallel: this rank's band of the split's grid (refused, alike on
  // every rank, where the model or the grid cannot be split), its tiled
  // forward, its sample group's windows and trajectories. One process: all.
  void place_band() {
    if (!world) {
      mine = n;
      trajectories = set->n_trajectories();
      return;
    }
    const int64_t ranks = o.domain_parallel;
    const auto flag = "--domain-parallel " + std::to_string(ranks);
    if (const auto why = tiled_unsupported(model); !why.empty()) {
      throw PredictUsageError(flag +
                              ": each rank runs its band in tiles, and this model cannot: " + why);
    }
    const auto& grid = set->grid();
    if (const auto why = domain_unsupported(model, grid, ranks); !why.empty()) {
      throw PredictUsageError(o.input + ": " + why + " (" + flag + ")");
    }
    mesh = make_domain_mesh(world, ranks);
    metric.band = make_band(mesh, grid[0], nullptr);
    metric.device = device;
    row0 = metric.band.row0;
    widest = band_rows(grid[0], ranks, 0).second;
    set->select_rows(row0, band_rows(grid[0], ranks, metric.band.rank).second);
    tiles = std::make_unique<TiledRunner>(model, nullptr);
    tiles->set_band(metric.band);
    // The sample groups' shares (group_share).
    groups = world->size() / ranks;
    const int64_t g = world->rank() / ranks;
    std::tie(first_window, mine) = group_share(n, groups, g);
    std::tie(first_trajectory, trajectories) = group_share(set->n_trajectories(), groups, g);
  }

  // The model, its weights and the run's normalizers; the precision and the device.
  void load_model() {
    precision = o.precision.empty() ? cfg.training.precision : parse_precision(o.precision);
    device = pick_device(o.device);
    matmul.emplace(precision);
    weights_path = o.checkpoint.empty() ? o.run_dir + "/model.pt" : o.checkpoint;
    if (!std::filesystem::exists(weights_path)) {
      throw std::runtime_error(weights_path + ": no such file" +
                               (o.checkpoint.empty() ? " (the run has not finished; name a "
                                                       "checkpoint with --checkpoint)"
                                                     : ""));
    }
    TensorDict weights;
    model = load_model_weights(cfg.model, precision, weights_path, cfg_path + "'s model", device,
                               weights);
    r.normalizers = load_normalizers(cfg, o.run_dir, weights, weights_path, in_norm, out_norm);
    in_norm.to(device);
    out_norm.to(device);
  }

  // The benchmark's split, read as the run's test sets are, checked against the model.
  void open_set() {
    const auto& tests = cfg.data.tests;
    split = !o.split.empty()                                 ? o.split
            : (tests.empty() || tests.front().split.empty()) ? std::string("test")
                                                             : tests.front().split;
    set = std::make_unique<data::BenchmarkSet>(o.input, benchmark_options(cfg.data, split, -1));
    in_ch = set->input_channels();
    out_ch = set->output_channels();
    const auto& mo = cfg.model;
    if (static_cast<int64_t>(in_ch.size()) != mo.in_channels() ||
        static_cast<int64_t>(out_ch.size()) != mo.out_channels()) {
      throw std::runtime_error(o.input + ": split '" + split + "' gives " +
                               std::to_string(in_ch.size()) + " input and " +
                               std::to_string(out_ch.size()) + " output channels; the model (" +
                               cfg_path + ") takes " + std::to_string(mo.in_channels()) + " and " +
                               std::to_string(mo.out_channels()));
    }
    const int64_t held = set->n_windows();
    if (o.first >= held || (o.count > 0 && o.first + o.count > held)) {
      throw PredictUsageError(o.input + ": --samples " + std::to_string(o.first) + ":" +
                              (o.count > 0 ? std::to_string(o.count) : std::string()) +
                              " asks past the " + std::to_string(held) + " windows of split '" +
                              split + "'");
    }
    if (o.rollout && !can_roll_out(*set)) {
      throw PredictUsageError(
          "--rollout: the run's targets (data.target_fields) are not its "
          "time-varying inputs, so its predictions cannot be fed back");
    }
    n = o.count > 0 ? o.count : held - o.first;
    r.n_samples = n;
    r.grid = set->grid();
  }

  // The next steps of every window (this sample group's), in batches, and
  // their metric per field (every group's).
  void predict_windows() {
    // (domain parallel: this rank's rows of the grid alone, place_band)
    // x: [mine, C_in, *S], y: [mine, C_out, *S]
    const int64_t w0 = o.first + first_window;
    const auto w = mine > 0 ? set->windows(w0, w0 + mine) : data::FieldPairs{};
    const auto& tests = cfg.data.tests;
    const int64_t batch = std::min<int64_t>(
        n, o.batch_size > 0 ? o.batch_size
                            : (tests.empty() ? cfg.data.batch_size : tests.front().batch_size));
    // (the plan of a whole batch, the same on every rank: the set's, not this group's)
    std::vector<int64_t> shape{batch, static_cast<int64_t>(in_ch.size())};
    const auto rows = set->read_grid();
    shape.insert(shape.end(), rows.begin(), rows.end());
    const int64_t elem = c10::elementSize(compute_dtype(precision));
    if (tiles) {  // (the widest band's plan, the same on every rank)
      shape[2] = widest;
      plan = band_plan(model, shape, ForwardBudget(), device, elem);
    } else {
      plan = choose_forward_plan(model, shape, ForwardBudget(), device, elem);
    }
    const int64_t f = cfg.data.horizon;
    const auto& fields = set->target_field_channels();
    auto sums = torch::zeros({static_cast<int64_t>(fields.size())}, torch::kDouble);
    std::vector<torch::Tensor> preds, errors;
    wall0 = std::chrono::steady_clock::now();
    for (int64_t first = 0; first < mine; first += batch) {
      const int64_t b = std::min(batch, mine - first);
      const auto t0 = std::chrono::steady_clock::now();
      const auto out = forward(w.x.narrow(0, first, b));
      r.forward_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      const auto yb = w.y.narrow(0, first, b);
      sums += window_error_sums(metric, out, yb, f);
      // Each window's metric per output channel: [b * f, F] -> [b, f * F]
      errors.push_back(metric(out.flatten(0, 1).unflatten(0, {b * f, -1}),
                              yb.flatten(0, 1).unflatten(0, {b * f, -1}))
                           .reshape({b, -1}));
      preds.push_back(out);
    }
    add_per_channel(metrics, metric.name(), over_groups(sums), static_cast<double>(n * f), fields);
    if (mine > 0) datasets = {{"pred", torch::cat(preds)}, {metric.name(), torch::cat(errors)}};
  }

  // --rollout: every trajectory rolled out as fno_train's evaluation does.
  // (This sample group's trajectories; the metric, every group's.)
  void roll_out() {
    if (!o.rollout) return;
    std::vector<torch::Tensor> rolled(static_cast<size_t>(trajectories));
    const auto [sums, count] = rollout_error_sums(
        metric, *set, [this](const torch::Tensor& x) { return forward(x); },
        [&](int64_t k, const torch::Tensor& p) {
          rolled[static_cast<size_t>(k - first_trajectory)] = p;
        },
        first_trajectory, trajectories);
    const auto all = over_groups(torch::cat({sums, torch::tensor({count}, torch::kDouble)}));
    const int64_t fields = sums.size(0);
    add_per_channel(metrics, "rollout_" + metric.name(), all.narrow(0, 0, fields),
                    all[fields].item<double>(), set->target_field_channels());
    // [trajectories, T - h, F, *S]
    if (trajectories > 0) datasets.emplace_back("rollout", torch::stack(rolled));
  }

  // Domain parallel: rank 0 makes the output's temporary file, every dataset
  // whole in shape; then each rank in turn writes its rows of the predictions
  // into it (rank 0 the per-window metric too), so that no rank holds the
  // whole grid's output; rank 0 commits it in finish().
  void create_output() {
    if (!world->is_main()) return;
    std::vector<std::pair<std::string, std::vector<int64_t>>> sets;
    int64_t bytes = 0;
    // (rank 0's group has a share of both: at least one window and one trajectory)
    for (const auto& [name, t] : datasets) {
      auto shape = t.sizes().vec();
      shape[0] = name == "rollout" ? set->n_trajectories() : n;
      if (const int64_t d = row_dim(name); d > 0) shape[static_cast<size_t>(d)] = set->grid()[0];
      int64_t count = 1;
      for (const auto v : shape) count *= v;
      bytes += count * 4;
      sets.emplace_back(name, shape);
    }
    // (--overwrite: made whole beside the old one, then renamed over it)
    writer = std::make_unique<data::Hdf5SampleWriter>(
        o.out, sets,
        data::SampleWriterOptions().replace(o.overwrite).compress(bytes <= (int64_t{64} << 20)));
    temp = writer->release();
  }

  // Rank 0's temporary file's path on every rank.
  void share_output(dist::Group& w) { temp = from_main(w, temp); }

  // This rank's rows of its group's predictions (and on each group's first
  // rank the per-window metric) into the temporary file, on its turn.
  void write_band() {
    const bool first_band = metric.band.rank == 0;
    std::vector<std::string> names;
    for (const auto& d : datasets) {
      if (row_dim(d.first) > 0 || first_band) names.push_back(d.first);
    }
    if (names.empty()) return;  // (a group with no window and no trajectory)
    auto out = data::Hdf5SampleWriter::join(temp, names);
    for (const auto& [name, t] : datasets) {
      const int64_t at = name == "rollout" ? first_trajectory : first_window;
      if (const int64_t d = row_dim(name); d > 0) {
        out->write_rows(name, at, d, row0, t);
      } else if (first_band) {
        out->write(name, at, t);
      }
    }
    out->release();
  }

  // The dim of a dataset's rows of the grid: pred [n, C, rows, *S'], rollout
  // [N_traj, T', F, rows, *S']; 0 for the per-window metric, which has none.
  static int64_t row_dim(const std::string& name) {
    return name == "pred" ? 2 : name == "rollout" ? 3 : 0;
  }

  // The output (the channels' names as attributes), then the summary (rank 0
  // alone under domain parallel).
  PredictResult finish() {
    r.forward_wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    r.plan =
        device.str() + ", " + to_string(precision) + ", " + std::to_string(n) + " window(s) of " +
        to_string(cfg.data.format) + " split '" + split + "' at " + grid_text(set->grid()) + ": " +
        (tiles ? "domain parallel " + std::to_string(o.domain_parallel) +
                     (groups > 1 ? " (" + std::to_string(groups) + " sample groups)" : "") + ", "
               : "") +
        plan->text;
    if (world && !world->is_main()) {
      r.metrics = metrics;
      r.out = o.out;
      r.main = false;
      return r;
    }
    const std::vector<data::Attribute> attrs{
        text_attr("model", o.run_dir),
        text_attr("weights", weights_path),
        text_attr("normalizers", r.normalizers),
        text_attr("input", o.input),
        text_attr("format", to_string(cfg.data.format)),
        text_attr("split", split),
        number_attr("first", static_cast<double>(o.first)),
        number_attr("count", static_cast<double>(n)),
        text_attr("input_channels", joined(in_ch)),
        text_attr("channels", joined(out_ch)),
        text_attr("metric", metric.name()),
        text_attr("rollout_channels", o.rollout ? joined(set->target_field_channels()) : ""),
        text_attr("precision", to_string(precision)),
        text_attr("device", device.str()),
        text_attr("plan", r.plan),
        text_attr("config", cfg.resolved_yaml)};
    if (writer) {  // (domain parallel: the file the ranks wrote their rows into)
      writer->commit(attrs);
    } else {
      data::write_hdf5(o.out, datasets, attrs);
    }
    json::Object s;
    s.str("model", o.run_dir)
        .str("weights", weights_path)
        .str("input", o.input)
        .str("format", to_string(cfg.data.format))
        .str("split", split)
        .str("output", o.out)
        .integer("first", o.first)
        .integer("n_windows", n)
        .integer("n_trajectories", set->n_trajectories())
        .str("grid", grid_text(set->grid()))
        .str("precision", to_string(precision))
        .str("plan", r.plan)
        .num("forward_wall_seconds", r.forward_wall_s);
    for (const auto& [k, v] : metrics) s.num(k, v);
    const std::string text = s.text() + "\n";
    const std::string summary = predict_summary_path(o.out);
    try {
      write_file_atomic(summary, text.data(), text.size());
    } catch (...) {
      std::remove(o.out.c_str());  // no output without its summary
      throw;
    }
    r.metrics = metrics;
    r.out = o.out;
    r.summary = summary;
    return r;
  }

 private:
  // Per-channel sums of this sample group's, added over the groups (through
  // the ranks of this band in each, mesh.data), on the CPU.
  torch::Tensor over_groups(const torch::Tensor& sums) {
    if (groups <= 1) return sums;
    const auto c = sums.contiguous();
    // (--domain-parallel 1: each rank is a sample group of its own)
    auto& over = mesh.data ? *mesh.data : *world;
    const auto summed = over.all_reduce_sum(
        std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel()));
    return torch::tensor(summed, torch::kDouble);
  }

  // A batch of windows through the model, normalized and decoded.
  // x: [b, C_in, *S] raw -> [b, C_out, *S] decoded, on the CPU
  torch::Tensor forward(const torch::Tensor& x) {
    torch::NoGradGuard no_grad;
    auto in = normalize_rows(in_norm, x.to(device), row0, /*inverse=*/false);
    auto out = forward_under_plan(model, *plan, in, tiles.get()).to(torch::kFloat);
    return normalize_rows(out_norm, out, row0, /*inverse=*/true).cpu();
  }

  const PredictOptions& o;
  const RunConfig cfg;
  const std::string cfg_path;
  BenchmarkMetric metric = benchmark_metric(cfg.data.format);
  PredictResult r;
  // place_band (domain parallel): the world, the mesh, this rank's first row
  // and the widest band's rows, the band's tiled forward; the sample groups,
  // and this group's windows [first_window, + mine) of the n asked for and
  // trajectories [first_trajectory, + trajectories) (one process: all)
  std::shared_ptr<dist::Group> world;
  DomainMesh mesh;
  int64_t row0 = 0, widest = 0;
  std::unique_ptr<TiledRunner> tiles;
  int64_t groups = 1, first_window = 0, mine = 0, first_trajectory = 0, trajectories = 0;
  // load_model
  Precision precision = Precision::kFP32;
  torch::Device device{torch::kCPU};
  std::optional<MatmulPrecisionGuard> matmul;
  std::string weights_path;
  FNO model{nullptr};
  data::UnitGaussianNormalizer in_norm, out_norm;
  // open_set
  std::string split;
  std::unique_ptr<data::BenchmarkSet> set;
  std::vector<std::string> in_ch, out_ch;
  int64_t n = 0;
  // predict_windows, roll_out
  std::optional<ForwardPlan> plan;
  std::chrono::steady_clock::time_point wall0;
  std::map<std::string, double> metrics;
  std::vector<std::pair<std::string, torch::Tensor>> datasets;
  // create_output (domain parallel): rank 0's writer of the output; every
  // rank's path of its temporary file
  std::string temp;
  std::unique_ptr<data::Hdf5SampleWriter> writer;
};

}  // namespace

std::optional<RunConfig> benchmark_run_config(const PredictOptions& o) {
  const std::string cfg_path = o.run_dir + "/config.yaml";
  if (!o.model_config.empty() || !std::filesystem::exists(cfg_path)) return std::nullopt;
  RunConfig cfg;
  try {
    cfg = load_config(cfg_path);
  } catch (const std::exception&) {
    return std::nullopt;  // predict() reports it, after the request's own checks
  }
  if (cfg.data.format == DataFormat::kAuto) return std::nullopt;
  return cfg;
}

PredictResult predict_benchmark_domain(const PredictOptions& o, RunConfig cfg,
                                       std::shared_ptr<dist::Group> world) {
  auto& w = *world;
  BenchmarkPrediction run(o, std::move(cfg), o.run_dir + "/config.yaml", std::move(world));
  agreed(w, [&] {
    check_request(o, predict_summary_path(o.out));
    run.load_model();
    run.open_set();
    run.place_band();
  });
  agreed(w, [&] {
    run.predict_windows();
    run.roll_out();
  });
  agreed(w, [&] { run.create_output(); });
  run.share_output(w);
  for (int64_t turn = 0; turn < w.size(); ++turn) {
    agreed(w, [&] {
      if (turn == w.rank()) run.write_band();
    });
  }
  PredictResult r;
  agreed(w, [&] { r = run.finish(); });
  return r;
}

std::optional<PredictResult> predict_benchmark(const PredictOptions& o) {
  auto cfg = benchmark_run_config(o);
  if (!cfg) return std::nullopt;
  const std::string cfg_path = o.run_dir + "/config.yaml";
  check_request(o, predict_summary_path(o.out));
  BenchmarkPrediction run(o, std::move(*cfg), cfg_path);
  run.load_model();
  run.open_set();
  run.place_band();
  run.predict_windows();
  run.roll_out();
  return run.finish();
}

}  // namespace fno::detail
