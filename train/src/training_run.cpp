// The training loop of one Trainer::train: epochs, steps, telemetry, the stop
// on a signal, checkpoints and the epoch line.
#include "training_run.h"

namespace fno {
namespace detail {

void TrainingRun::open_logs() {
  if (s_.main()) metrics_log_.open(s_.path("metrics.jsonl"), std::ios::app);
  if (s_.main() && !metrics_log_) {
    throw std::runtime_error(s_.path("metrics.jsonl") + ": cannot open for writing");
  }
  // Offload telemetry, and the memory timeline of one step (the third: the
  // first ones pay for cuDNN/cuFFT plans and the pinned pool).
  if (s_.step->offloading() && s_.main()) {
    telemetry_.open(s_.path("telemetry.jsonl"), std::ios::app);
    if (!telemetry_)
      throw std::runtime_error(s_.path("telemetry.jsonl") + ": cannot open for writing");
  }
  const int64_t n = s_.n_train_samples();
  const int64_t steps_per_epoch = (n + c_.data.batch_size - 1) / c_.data.batch_size;
  // (A rollout's step records no timeline: fno_engine/offload_step.h.)
  if (c_.offload.timeline && s_.device.is_cuda() && s_.main() && !s_.recurrent()) {
    timeline_step_ = std::min<int64_t>(2, steps_per_epoch * c_.training.epochs - 1);
  }
}

// The model's prediction for a batch of kept inputs, decoded: one forward, or
// for the recurrent Navier-Stokes model its rollout (within the step's plan,
// without gradients).
// x: [B, Cin, *S] -> [B, Cout, *S] (recurrent: [B, t_in, R, R] -> [B, t_out, R, R])

void TrainingRun::save_checkpoints(const std::vector<std::string>& names, int64_t epoch,
                                   int64_t batch, double loss_sum, int64_t samples) {
  if (!s_.main() || names.empty()) return;
  auto snap = std::make_shared<TensorSnapshot>(
      snapshot_tensors(checkpoint_dict(s_, epoch, batch, loss_sum, samples)));
  writer_.submit(
      [snap, names, dir = s_.run_dir] {
        snap->wait();
        // One digest and serialization for all the names: the same bytes in each.
        const auto bytes = checkpoint_file_bytes(snap->tensors);
        for (const auto& name : names) {
          const std::string path = dir + "/" + name;
          if (name == "checkpoint_latest.pt" && file_exists(path) &&
              ::rename(path.c_str(), (dir + "/checkpoint_previous.pt").c_str()) != 0) {
            throw std::runtime_error(
                path + ": cannot rotate to checkpoint_previous.pt: " + std::strerror(errno));
          }
          write_file_atomic(path, bytes.data(), bytes.size());
        }
      },
      names);
}

// The shared training step (TrainStep), with a step that does not fit the
// GPU (or auto's budget) turned into a TrainingError with advice. The
// result's loss is the batch's; fp16 may have skipped the step.
StepResult TrainingRun::train_step(const torch::Tensor& x, const torch::Tensor& y) {
  torch::Tensor loss;
  try {
    // Under CUDA graphs the whole step is one graph (its out-of-memory error
    // comes from a warm-up step or the capture).
    if (s_.train_step->cuda_graphs()) return s_.train_step->run(x, y);
    loss = s_.train_step->forward_backward(x, y);
  } catch (const offload::BudgetError& e) {
    progress_.break_line();
    throw TrainingError(e.what());
  } catch (const c10::OutOfMemoryError&) {
    progress_.break_line();
    writer_.wait();  // (the last checkpoint on disk, or its write error)
    const std::string advice =
        word_memory_advice(s_.step->out_of_memory_advice(x), s_.cfg.offload.policy);
    const std::string latest = s_.path("checkpoint_latest.pt");
    throw TrainingError(
        "CUDA out of memory in a training step on a batch " + c10::str(x.sizes()) + ": " + advice +
        (file_exists(latest) ? "; the last checkpoint is " + latest : std::string("")));
  }
  // Outside the handlers above: an error of the update is not the step's out of memory.
  return s_.train_step->update(loss);
}

// Telemetry of an offloaded step (telemetry.jsonl), and the memory timeline of the recorded one.
void TrainingRun::after_step(int64_t epoch, Clock::time_point step_t0, bool record) {
  if (telemetry_.is_open()) {
    JsonObject t;
    t.integer("epoch", epoch)
        .integer("step", global_step_)
        .num("host_ms", std::chrono::duration<double, std::milli>(Clock::now() - step_t0).count())
        .raw("offload", s_.step->last_stats().to_json());
    telemetry_ << t.text() << "\n";
    if (!telemetry_) throw std::runtime_error(s_.path("telemetry.jsonl") + ": write failed");
  }
  if (record) {
    write_text_atomic(
        s_.path("memory_timeline.csv"),
        offload::timeline_csv(s_.step->last_stats().timeline,
                              "GPU memory of one training step; policy " + c_.offload.policy.text +
                                  ", device " + s_.device.str() + ", batch " +
                                  std::to_string(c_.data.batch_size)));
  }
  ++global_step_;
}

// Stop after this step: save where we are, mid-epoch, and let the caller exit.
void TrainingRun::stop(int sig, int64_t epoch, size_t batch, std::pair<double, int64_t> totals) {
  progress_.break_line();
  save_checkpoints({"checkpoint_latest.pt"}, epoch - 1, static_cast<int64_t>(batch), totals.first,
                   totals.second);
  writer_.wait();  // on disk before the process exits
  throw Interrupted(
      sig, "stopped by " + std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + " in epoch " +
               std::to_string(epoch) + " after batch " + std::to_string(batch) +
               (s_.main() ? "; checkpoint written" : "; rank 0 wrote the checkpoint") +
               "; continue with --resume " + s_.run_dir);
}

namespace {

// An epoch's running sums on the device: the loss and samples of the steps
// taken (fp16 skips steps with non-finite gradients; under CUDA graphs it
// decides on the device, so the samples and steps taken are counted there),
// and with training.max_grad_norm each step's gradient norm, by batch (one
// copy a step; their statistics read once, after the epoch; NaN: no step).
struct EpochSums {
  torch::Tensor loss_sum;      // [] float64
  int64_t samples = 0;         // of the steps taken, counted on the host
  torch::Tensor taken_counts;  // fp16 under graphs: [2] float64, samples and steps taken
  int64_t device_steps = 0;    // steps whose taking taken_counts counts
  torch::Tensor norms;         // [batches] float32

  EpochSums(const torch::Device& device, bool device_counts, int64_t batches, bool with_norms) {
    loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device));
    if (device_counts) taken_counts = torch::zeros({2}, loss_sum.options());
    if (with_norms) {
      norms = torch::full({batches}, std::numeric_limits<float>::quiet_NaN(),
                          loss_sum.options().dtype(torch::kFloat));
    }
  }
  // Batch b's step on `batch` samples. (A graph's outputs hold until its next
  // replay: they are used here, on the same stream.)
  void add(const StepResult& result, int64_t b, int64_t batch) {
    if (result.grad_norm.defined() && norms.defined()) norms[b].copy_(result.grad_norm);
    if (result.taken.defined()) {
      const auto taken = result.taken.reshape({}).to(torch::kDouble);
      loss_sum += at::where(taken > 0, result.loss.detach().to(torch::kDouble), 0.0);
      taken_counts += torch::stack({taken * static_cast<double>(batch), taken});
      ++device_steps;
    } else if (result.stepped) {
      loss_sum += result.loss.detach().to(torch::kDouble);
      samples += batch;
    }
  }
  // The loss and samples so far, over all ranks (`group` null: this one);
  // steps skipped on the device are added to `skipped`.
  std::pair<double, int64_t> totals(dist::Group* group, int64_t& skipped) const {
    double l = 0;
    double k = static_cast<double>(samples);
    if (taken_counts.defined()) {  // one read for the three numbers
      const auto v = torch::cat({loss_sum.reshape({1}), taken_counts}).cpu();
      const auto* n = v.data_ptr<double>();
      l = n[0];
      k += n[1];
      skipped += device_steps - std::llround(n[2]);
    } else {
      l = loss_sum.item<double>();
    }
    if (group) {
      const auto t = group->all_reduce_sum(std::vector<double>{l, k});
      l = t[0];
      k = t[1];
    }
    return {l, static_cast<int64_t>(std::llround(k))};
  }
  // The finite norms' mean and largest (0 where none is finite).
  void norm_stats(EpochStats& stats) const {
    if (!norms.defined()) return;
    const auto g = norms.to(torch::kDouble);
    const auto finite = at::isfinite(g);
    const auto v = at::where(finite, g, 0.0);
    const auto n = torch::stack({v.sum(), finite.sum().to(torch::kDouble), v.max()}).cpu();
    const auto* p = n.data_ptr<double>();
    stats.grad_norm_mean = p[1] > 0 ? p[0] / p[1] : 0.0;
    stats.grad_norm_max = p[2];
  }
};

}  // namespace

EpochStats TrainingRun::train_epoch(int64_t epoch) {
  EpochStats stats;
  if (s_.device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(s_.device.index());
  s_.model->train();
  stats.lr = s_.optimizer->param_groups()[0].options().get_lr();
  const auto batches = s_.stream ? s_.stream->epoch(epoch) : s_.epoch_batches(epoch);
  // The epoch's sample order goes to the data's device once; each batch is a
  // slice of it. (A small index copied per batch from pageable memory would
  // synchronize the stream every step and expose every kernel launch.)
  const auto order = torch::cat(batches).to(s_.stream ? torch::kCPU : s_.train_x.device());
  std::vector<int64_t> offsets{0};
  for (const auto& b : batches) offsets.push_back(offsets.back() + b.numel());
  EpochSums sums(s_.device, s_.scaler && s_.train_step->cuda_graphs(),
                 static_cast<int64_t>(batches.size()), c_.training.max_grad_norm > 0);
  size_t first_batch = 0;
  if (epoch == s_.start_epoch + 1 && s_.start_batch > 0) {  // resuming an interrupted epoch
    first_batch = static_cast<size_t>(s_.start_batch);
    if (s_.shard() == 0) {  // the sums so far are over all shards: count them once
      sums.loss_sum += s_.start_loss_sum;
      sums.samples += s_.start_samples;
    }
  }
  // (Under domain parallel, a sample's ranks share its loss: the sums add over the shards.)
  const auto totals = [&] { return sums.totals(s_.shard_group(), stats.skipped); };
  // The samples of this epoch over all ranks (each rank's batches are equal in size).
  const auto all_ranks = [&](int64_t n) { return n * s_.shards(); };
  progress_.start_epoch(all_ranks(offsets[first_batch]));
  for (size_t b = first_batch; b < batches.size(); ++b) {
    const auto i = order.narrow(0, offsets[b], offsets[b + 1] - offsets[b]);
    const auto [x, y] = s_.training_batch(epoch, static_cast<int64_t>(b), i);
    const bool record = timeline_step_ == global_step_;
    if (record) s_.step->record_next_timeline();
    const auto step_t0 = Clock::now();
    const auto result = train_step(x, y);
    if (!result.stepped) ++stats.skipped;
    if (s_.step->offloading()) {
      stats.step_peak = std::max(stats.step_peak, s_.step->last_stats().peak_allocated);
    }
    after_step(epoch, step_t0, record);
    sums.add(result, static_cast<int64_t>(b), x.size(0));
    // Several ranks stop together: a signal to any of them stops all after this step.
    const int sig =
        s_.group ? static_cast<int>(s_.group->all_reduce_max(stop_signal())) : stop_signal();
    if (sig != 0) stop(sig, epoch, b + 1, totals());
    progress_.batch(epoch, c_.training.epochs, b + 1, batches.size(), all_ranks(offsets[b + 1]),
                    all_ranks(offsets.back()));
  }
  if (s_.stream) std::tie(stats.data_wait_s, stats.data_read_s) = s_.stream->take_times();
  // The mean over the samples of the steps taken, over all ranks.
  const auto [epoch_loss, epoch_samples] = totals();
  stats.train_loss = epoch_loss / static_cast<double>(epoch_samples);
  sums.norm_stats(stats);
  if (!std::isfinite(stats.train_loss)) {
    progress_.break_line();
    writer_.wait();  // the last good checkpoint on disk (nothing of this epoch is written)
    const std::string kept =
        file_exists(s_.path("checkpoint_latest.pt"))
            ? "; the last good checkpoint is " + s_.path("checkpoint_latest.pt")
            : "; no checkpoint was written";
    throw TrainingError("epoch " + std::to_string(epoch) + ": the training loss is " +
                        (std::isnan(stats.train_loss) ? "NaN" : "infinite") + "; stopped" + kept);
  }
  return stats;
}

void TrainingRun::end_epoch(int64_t epoch, const EpochStats& stats, Clock::time_point t0) {
  if (s_.scheduler) s_.scheduler->step(stats.train_loss);
  std::map<std::string, double> metrics;
  if (epoch % c_.training.eval_every == 0 || epoch == c_.training.epochs) metrics = evaluate();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  int64_t peak = 0;
  if (s_.device.is_cuda()) {
    // The offloader resets the allocator's peak at every step it runs: keep
    // the largest step peak too.
    // Under CUDA graphs the replays allocate nothing: the captures' peak counts.
    peak = std::max(
        {stats.step_peak, s_.train_step->graph_peak_bytes(),
         static_cast<int64_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(s_.device.index())
                                  .allocated_bytes[0]
                                  .peak)});
  }
  if (s_.group) peak = s_.group->all_reduce_max(peak);  // the largest of any rank's GPU
  log_epoch(epoch, stats, metrics, seconds, peak);
  // One request to the writer: the best and the latest checkpoint of this
  // epoch are one snapshot (the same state), written in this order.
  std::vector<std::string> checkpoints;
  if (!metrics.empty()) {
    last_metrics = metrics;
    if (!s_.best_key.empty() && metrics.count(s_.best_key) && metrics[s_.best_key] < s_.best) {
      s_.best = metrics[s_.best_key];
      checkpoints.push_back("checkpoint_best.pt");
    }
  }
  if (epoch % c_.training.checkpoint_every == 0 || epoch == c_.training.epochs) {
    checkpoints.push_back("checkpoint_latest.pt");
  }
  save_checkpoints(checkpoints, epoch);
  if (!progress_.shows()) return;
  std::ostringstream msg;
  msg << "epoch " << epoch << "/" << c_.training.epochs << "  lr " << stats.lr << "  train_"
      << to_string(c_.training.loss) << " " << stats.train_loss;
  for (const auto& [k, v] : metrics) msg << "  " << k << " " << v;
  if (c_.training.max_grad_norm > 0) msg << "  grad_norm_max " << stats.grad_norm_max;
  if (s_.scaler) {
    msg << "  loss_scale " << s_.scaler->scale_value() << "  skipped " << stats.skipped;
  }
  char secs[32];
  std::snprintf(secs, sizeof(secs), "  %.2fs", seconds);
  msg << secs;
  progress_.epoch_line(msg.str());
}

// One line of metrics.jsonl (rank 0).
void TrainingRun::log_epoch(int64_t epoch, const EpochStats& stats,
                            const std::map<std::string, double>& metrics, double seconds,
                            int64_t peak) {
  JsonObject line;
  line.integer("epoch", epoch).num("lr", stats.lr).num("train_loss", stats.train_loss);
  for (const auto& [k, v] : metrics) line.num(k, v);
  if (!metrics.empty()) {
    for (const auto& [k, errors] : per_record) {
      std::string list = "[";
      for (size_t t = 0; t < errors.size(); ++t) list += (t ? ", " : "") + json::number(errors[t]);
      line.raw(k, list + "]");
    }
  }
  if (c_.training.max_grad_norm > 0) {
    line.num("grad_norm", stats.grad_norm_mean).num("grad_norm_max", stats.grad_norm_max);
  }
  line.num("seconds", seconds).integer("peak_gpu_bytes", peak);
  // data.stream: the steps' waits for batches not read yet, and the reads' own time.
  if (stats.data_wait_s >= 0) {
    line.num("data_wait_s", stats.data_wait_s).num("data_read_s", stats.data_read_s);
  }
  if (s_.scaler) {
    line.integer("skipped_steps", stats.skipped).num("loss_scale", s_.scaler->scale_value());
  }
  if (s_.main()) {
    metrics_log_ << line.text() << "\n";
    metrics_log_.flush();
    if (!metrics_log_) throw std::runtime_error(s_.path("metrics.jsonl") + ": write failed");
  }
}

// predictions.h5: the first few samples of each test set.

}  // namespace detail
}  // namespace fno
