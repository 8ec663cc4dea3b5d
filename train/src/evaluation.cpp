// Evaluation of one Trainer::train: the test sets' metrics (eagerly or as
// CUDA graphs), predictions.h5, model.pt and summary.json.
#include "training_run.h"

#include <fno/overrides.h>

namespace fno {
namespace detail {

// The metrics of a test set: under domain parallel, each the whole grid's
// from this rank's rows (band_loss).
std::map<std::string, EvalLoss> TrainingRun::set_losses(const EvalSet& e) const {
  if (!s_.domain) return losses_;
  const int64_t d = static_cast<int64_t>(c_.model.n_modes().size());
  std::map<std::string, EvalLoss> losses;
  for (const auto loss : c_.training.eval_losses)
    losses[to_string(loss)] = band_loss(loss, d, e.band);
  return losses;
}

torch::Tensor TrainingRun::record_errors(const torch::Tensor& out, const torch::Tensor& y,
                                         const Band& band) const {
  const auto p = s_.trajectory(out), t = s_.trajectory(y);  // [B, T, *S]
  if (!band.split()) {
    return torch::stack({per_step_rel_l2(p, t), cumulative_rel_l2(p, t)}).to(torch::kDouble);
  }
  // The squared norms of the error and of the truth per sample and record,
  // [2, B, T], summed over the rows of every band of the sample.
  auto norms = torch::stack({(p - t).flatten(2).pow(2).sum(-1), t.flatten(2).pow(2).sum(-1)});
  band.sum(norms);
  // sum over samples of sqrt(err) / (sqrt(truth) + LpLoss's eps): [B, T] -> [T]
  const auto ratio = [eps = LpLossOptions().eps()](const torch::Tensor& e, const torch::Tensor& n) {
    return (e.sqrt() / (n.sqrt() + eps)).sum(0);
  };
  const auto err = norms[0], truth = norms[1];
  return torch::stack({ratio(err, truth), ratio(err.cumsum(1), truth.cumsum(1))})
      .to(torch::kDouble);
}

// The model's forward under the step's forward plan (OffloadedStep::forward:
// the training plan at the training grid, a plan chosen for the grid
// elsewhere), decoded.
// x: [b, Cin, *S] -> [b, Cout, *S] (a rollout: its trajectory)
torch::Tensor TrainingRun::predict(const torch::Tensor& x) {
  torch::Tensor out;
  try {
    if (s_.recurrent()) {
      out =
          rollout([this](const torch::Tensor& in) { return s_.step->forward(in); }, x, s_.ns_t_out);
    } else {
      out = s_.step->forward(s_.model_input(x));
    }
  } catch (const ForwardBudgetError& e) {
    // In the run's keys: the budget is what the run leaves of the limit.
    const int64_t limit = c_.offload.gpu_memory_limit;
    throw std::runtime_error(
        "offload.gpu_memory_limit " +
        (limit > 0 ? offload::format_bytes(limit) : std::string("(the free memory)")) +
        ": the evaluation's forward at " + c10::str(x.sizes().slice(2)) +
        ", with what the run leaves of it, " + e.detail());
  }
  return s_.out_rows().fitted() ? s_.out_rows().inverse_transform(out) : out;
}

void TrainingRun::capture_evaluation() {
  // (Never under domain parallel: its steps run eagerly, and eval_body's sums
  // are one process's, not a band's.)
  TORCH_CHECK(!s_.domain, "evaluation as CUDA graphs under distributed.domain_parallel ",
              s_.domain ? s_.domain->mesh.n : 1, ": a band's evaluation runs eagerly");
  const auto on = torch::TensorOptions().device(s_.device);
  eval_sums_ = torch::zeros({static_cast<int64_t>(losses_.size())}, on.dtype(torch::kFloat));
  if (s_.ns()) eval_steps_ = torch::zeros({2, s_.ns_t_out}, on.dtype(torch::kDouble));
  eval_graphs_ = std::make_unique<GraphedFunction>(
      [this](const std::vector<torch::Tensor>& in) { return eval_body(in); }, s_.device,
      TrainStep::kGraphWarmup, s_.train_step->graph_pool());
  if (c_.training.cuda_graphs == CudaGraphs::kAuto) {
    eval_graphs_->set_capture_limit_ms(s_.auto_capture_limit_ms());
  }
}

// One evaluation batch: the decoded prediction and each metric's sum over the
// batch, added into eval_sums_ in losses_' order (Navier-Stokes: the per-record
// errors into eval_steps_). evaluate()'s eager loop computes the same.
// x: [b, Cin, *S] as kept (normalized when encode_input), y: [b, Cout, *S] raw truth
std::vector<torch::Tensor> TrainingRun::eval_body(const std::vector<torch::Tensor>& in) {
  torch::NoGradGuard no_grad;
  const auto out = predict(in.at(0));
  const auto& y = in.at(1);
  std::vector<torch::Tensor> values;
  for (const auto& [name, fn] : losses_) {
    values.push_back(s_.recurrent() ? trajectory_rel_l2(out, y) : fn(out, y));
  }
  eval_sums_.add_(torch::stack(values));
  if (eval_steps_.defined()) {
    eval_steps_.add_(record_errors(out, y));
  }
  return {};
}

std::pair<int64_t, int64_t> TrainingRun::shard_share(int64_t n) const {
  const int64_t per = (n + s_.shards() - 1) / s_.shards();
  const int64_t lo = std::min(n, s_.shard() * per);
  return {lo, std::min(n, lo + per) - lo};
}

// Each metric of each test set: the mean per-sample relative error, over all
// ranks. Navier-Stokes adds each set's relative L2 error per predicted record
// ("<set>_l2_per_step"), their mean over the records ("<set>_l2_step") and the
// error of the trajectory up to each record ("<set>_l2_upto": a shorter
// rollout's whole-trajectory error); its "<set>_l2" is the error of the whole
// predicted trajectory (the paper's), upto's last entry.
std::map<std::string, double> TrainingRun::evaluate() {
  // Each metric's sum over its set (this rank's share) and the set's size.
  std::vector<std::string> keys;
  std::vector<double> sums_all, sizes;
  torch::NoGradGuard no_grad;
  s_.model->eval();
  for (const auto& e : s_.tests) {
    std::map<std::string, torch::Tensor> sums;
    torch::Tensor step_sums;  // Navier-Stokes: [2, t_out]
    // Several ranks: each shard evaluates a contiguous share of the set, and
    // the sums are added over the shards (no sample twice, none left out).
    const int64_t m = e.x.size(0);
    const auto [lo, count] = shard_share(m);
    const int64_t hi = lo + count;
    const SetBand on_band(s_, e);
    const auto losses = set_losses(e);
    if (eval_graphs_) {
      eval_sums_.zero_();
      if (eval_steps_.defined()) eval_steps_.zero_();
    }
    // In order, as contiguous slices: no index tensors, no host-device syncs.
    for (int64_t start = lo; start < hi; start += e.batch_size) {
      const int64_t len = std::min(e.batch_size, hi - start);
      if (eval_graphs_) {
        eval_graphs_->run({e.x.narrow(0, start, len), e.y.narrow(0, start, len)});
        if (const auto note = eval_graphs_->take_note(); !note.empty() && s_.main()) {
          std::fprintf(stderr, "fno_train: evaluation: %s\n", note.c_str());
        }
        continue;
      }
      const auto out = predict(e.x.narrow(0, start, len).to(s_.device, /*non_blocking=*/true));
      const auto y = e.y.narrow(0, start, len).to(s_.device, true);
      // Navier-Stokes: the batch's errors per record and up to each, [2, T]
      const auto records = s_.ns() ? record_errors(out, y, e.band) : torch::Tensor();
      if (records.defined()) step_sums = step_sums.defined() ? step_sums + records : records;
      for (const auto& [name, fn] : losses) {
        // summed over the batch; a rollout's L2 over its whole trajectory (on
        // a split band: the error up to its last record, of the whole grid)
        auto v = !s_.recurrent()  ? fn(out, y)
                 : e.band.split() ? records[1][-1]
                                  : trajectory_rel_l2(out, y);
        sums[name] = sums.count(name) ? sums[name] + v : v;
      }
    }
    // The set's sums in one read: each metric in losses_' order, then the
    // per-record sums (a rank without samples adds zeros).
    std::vector<torch::Tensor> parts;
    if (eval_graphs_) {
      parts.push_back(eval_sums_.to(torch::kDouble));
      if (eval_steps_.defined()) parts.push_back(eval_steps_.flatten());
    } else if (!sums.empty()) {
      for (const auto& [name, fn] : losses_)
        parts.push_back(sums[name].to(torch::kDouble).view({1}));
      if (step_sums.defined()) parts.push_back(step_sums.flatten());
    }
    e.band.drain();  // the band losses' sums done before the host reads them
    const auto read = parts.empty() ? torch::Tensor() : torch::cat(parts).cpu();
    const auto value = [&](int64_t i) { return read.defined() ? read[i].item<double>() : 0.0; };
    int64_t i = 0;
    for (const auto& [name, fn] : losses_) {
      keys.push_back(e.name + "_" + name);
      sums_all.push_back(value(i++));
      sizes.push_back(static_cast<double>(m));
    }
    for (int64_t r = 0; r < (s_.ns() ? 2 : 0); ++r) {
      for (int64_t t = 0; t < s_.ns_t_out; ++t) {
        keys.push_back(e.name + (r == 0 ? kPerStep : kUpTo) + std::to_string(t));
        sums_all.push_back(value(i++));
        sizes.push_back(static_cast<double>(m));
      }
    }
  }
  s_.model->train();
  if (auto* g = s_.shard_group()) sums_all = g->all_reduce_sum(sums_all);  // one collective for all
  std::map<std::string, double> metrics;
  per_record.clear();
  for (size_t k = 0; k < keys.size(); ++k) {
    const bool step = keys[k].find(kPerStep) != std::string::npos;
    const auto at = keys[k].find(step ? kPerStep : kUpTo);
    if (at == std::string::npos) {
      metrics[keys[k]] = sums_all[k] / sizes[k];
      continue;
    }
    const auto name = keys[k].substr(0, at) + (step ? "_l2_per_step" : "_l2_upto");
    per_record[name].push_back(sums_all[k] / sizes[k]);
  }
  for (const auto& e : s_.tests) {  // "<set>_l2_step": the mean over the records
    const auto errors = per_record.find(e.name + "_l2_per_step");
    if (errors == per_record.end()) continue;
    double sum = 0;
    for (const double v : errors->second) sum += v;
    metrics[e.name + "_l2_step"] = sum / static_cast<double>(errors->second.size());
  }
  return metrics;
}

// Checkpoints: rank 0 writes them (the state is the same on every rank), on
// the writer thread. This thread takes the snapshot (host copies: training goes
// on mutating the live tensors) and hands it over; it waits only when the
// writer is still busy with one request and another is queued that writes a
// file this one does not (BackgroundWriter::submit: a queued request whose
// files this one writes too is replaced by it). A write error surfaces at the
// next request or wait. The latest checkpoint rotates there: the one it
// replaces stays as checkpoint_previous.pt.

TrainingRun::Predictions TrainingRun::predictions() {
  if (c_.data.n_predictions <= 0 || s_.tests.empty()) return {};
  torch::NoGradGuard no_grad;
  s_.model->eval();
  std::vector<std::pair<std::string, torch::Tensor>> sets;
  for (const auto& e : s_.tests) {
    const int64_t k = std::min<int64_t>(c_.data.n_predictions, e.x.size(0));
    const SetBand on_band(s_, e);
    auto out = predict(e.x.narrow(0, 0, k).to(s_.device));
    // Navier-Stokes: the t_in input records [k, t_in, R, R], truth and
    // prediction as trajectories [k, t_out, R, R], and the set's errors per record and up
    // to each record [t_out].
    auto y = e.y.narrow(0, 0, k);
    auto x = e.x_raw.narrow(0, 0, k);
    if (s_.domain) {  // the k samples' bands, whole
      x = gather_rows(s_, e.band, x);
      y = gather_rows(s_, e.band, y);
      out = gather_rows(s_, e.band, out);
    }
    sets.emplace_back(e.name + "/x", x);
    sets.emplace_back(e.name + "/y", (s_.ns() ? s_.trajectory(y) : y).contiguous().cpu());
    sets.emplace_back(e.name + "/pred", (s_.ns() ? s_.trajectory(out) : out).contiguous().cpu());
    for (const char* what : {"_l2_per_step", "_l2_upto"}) {
      const auto errors = per_record.find(e.name + what);
      if (errors != per_record.end()) {
        sets.emplace_back(e.name + "/" + (what + 1),
                          torch::tensor(errors->second, torch::kDouble).to(torch::kFloat));
      }
    }
  }
  std::vector<data::Attribute> attrs;
  data::Attribute a;
  a.name = "epochs";
  a.number = static_cast<double>(c_.training.epochs);
  a.is_number = true;
  attrs.push_back(a);
  data::Attribute cfg_attr;
  cfg_attr.name = "config";
  cfg_attr.text = c_.resolved_yaml;
  attrs.push_back(cfg_attr);
  data::Attribute problem;
  problem.name = "problem";
  problem.text = to_string(c_.data.problem);
  attrs.push_back(problem);
  if (s_.ns()) {
    data::Attribute mode;
    mode.name = "ns_mode";
    mode.text = to_string(c_.data.ns_mode);
    attrs.push_back(mode);
  }
  return {std::move(sets), std::move(attrs)};
}

void TrainingRun::write_summary(const std::map<std::string, double>& metrics,
                                Clock::time_point wall0) {
  JsonObject summary;
  const std::string device =
      s_.device.is_cuda()
          ? s_.device.str() + " (" + at::cuda::getDeviceProperties(s_.device.index())->name + ")"
          : std::string("cpu");
  summary.integer("n_params", count_params(*s_.model))
      .str("precision", to_string(s_.precision))
      .raw("metrics", metrics_json(metrics))
      .str("device", device)
      .integer("epochs", c_.training.epochs)
      .integer("world_size", s_.world_size)
      .integer("domain_parallel", s_.domain ? s_.domain->mesh.n : 1)
      .num("wall_seconds", std::chrono::duration<double>(Clock::now() - wall0).count());
  if (!s_.best_key.empty()) summary.str("best_metric", s_.best_key).num("best", s_.best);
  // The experiment overrides this process ran under, when any was set.
  if (const auto o = json::overrides_json(overrides_set()); !o.empty()) summary.raw("overrides", o);
  write_text_atomic(s_.path("summary.json"), summary.text() + "\n");
}

// The predictions' forward runs here while the writer may still write the
// last checkpoint; predictions.h5 and model.pt are then one request to the
// writer, and summary.json is written once they are on disk.
void TrainingRun::write_outputs(const std::map<std::string, double>& metrics,
                                Clock::time_point wall0) {
  // (Under domain parallel every rank of the first shard makes the predictions.)
  auto preds = std::make_shared<Predictions>(predictions());
  if (!s_.main()) return;
  writer_.wait();
  // The model alone, as a plain state dict: torch.load + neuraloperator's
  // FNO.load_state_dict read it in Python.
  auto model = std::make_shared<TensorSnapshot>(snapshot_tensors(state_dict(*s_.model)));
  // The normalizers beside it (model.pt stays a plain state dict): with
  // model.pt and config.yaml, all that fno_predict needs.
  auto norms = std::make_shared<TensorDict>(normalizers_dict(s_));
  writer_.submit([preds, model, norms, predictions_h5 = s_.path("predictions.h5"),
                  model_pt = s_.path("model.pt"), norms_pt = s_.path("normalizers.pt")] {
    if (!preds->sets.empty()) data::write_hdf5(predictions_h5, preds->sets, preds->attrs);
    model->wait();
    if (!norms->is_empty()) save_tensor_dict(*norms, norms_pt);
    save_tensor_dict(model->tensors, model_pt);
  });
  writer_.wait();
  write_summary(metrics, wall0);
}

}  // namespace detail
}  // namespace fno
