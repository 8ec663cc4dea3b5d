#include <fno_train/bench.h>

#include <fno/losses.h>
#include <fno/optim.h>
#include <fno/overrides.h>
#include <fno/precision.h>
#include <fno/serialize.h>
#include <fno_engine/graphed_step.h>
#include <fno_engine/offload_step.h>
#include <fno_train/config.h>
#include <fno_train/distributed.h>
#include <fno_train/train_step.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "bench_domain.h"
#include "bench_trace.h"
#include "json.h"

namespace fno {
namespace {

// One step, timed from an idle GPU to an idle GPU, in ms.
double timed_step(TrainStep& train, const at::Tensor& x, const at::Tensor& y) {
  torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  train.run(x, y);
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Adds a timed step's link statistics to `sum` (and its link floor to `floor_ms`).
void add_stats(offload::StepStats& sum, double& floor_ms, const offload::StepStats& st) {
  sum.bytes_offloaded += st.bytes_offloaded;
  sum.bytes_prefetched += st.bytes_prefetched;
  sum.bytes_fetched_on_demand += st.bytes_fetched_on_demand;
  sum.bytes_reused_on_device += st.bytes_reused_on_device;
  sum.d2h_seconds += st.d2h_seconds;
  sum.h2d_seconds += st.h2d_seconds;
  sum.forward_wait_ms += st.forward_wait_ms;
  sum.forward_stall_ms += st.forward_stall_ms;
  sum.backward_wait_ms += st.backward_wait_ms;
  sum.link_overlap_ms += st.link_overlap_ms;
  floor_ms += st.link_floor_ms();
}

// The row's per-step means of the link statistics summed over n timed steps.
void set_link_stats(BenchRow& row, const offload::StepStats& sum, double floor_ms, double n) {
  row.bytes_offloaded = static_cast<int64_t>(sum.bytes_offloaded / n);
  row.bytes_prefetched = static_cast<int64_t>(sum.bytes_prefetched / n);
  row.bytes_on_demand = static_cast<int64_t>(sum.bytes_fetched_on_demand / n);
  row.bytes_reused_on_device = static_cast<int64_t>(sum.bytes_reused_on_device / n);
  row.d2h_busy_ms = sum.d2h_seconds * 1e3 / n;
  row.h2d_busy_ms = sum.h2d_seconds * 1e3 / n;
  if (sum.d2h_seconds > 0) row.d2h_gbps = sum.bytes_offloaded / sum.d2h_seconds / 1e9;
  if (sum.h2d_seconds > 0) {
    row.h2d_gbps = (sum.bytes_prefetched + sum.bytes_fetched_on_demand) / sum.h2d_seconds / 1e9;
  }
  row.forward_wait_ms = sum.forward_wait_ms / n;
  row.forward_stall_ms = sum.forward_stall_ms / n;
  row.backward_wait_ms = sum.backward_wait_ms / n;
  row.link_overlap_ms = sum.link_overlap_ms / n;
  row.link_floor_ms = floor_ms / n;
}

struct Runner {
  const BenchOptions& o;
  FNO model{nullptr};
  std::unique_ptr<AdamW> optimizer;
  H1Loss loss{H1LossOptions().d(static_cast<int64_t>(o.model.n_modes().size()))};
  std::map<std::string, std::unique_ptr<OffloadedStep>>
      steps;  // one per policy and precision: its pinned pool and plans persist
  bool traced = false;
  std::set<std::string> graph_messages;  // --cuda-graphs' fallbacks, each said once
  // Under torchrun: the ranks' group and the gradient all-reduce (null alone).
  std::shared_ptr<dist::Group> group;
  std::unique_ptr<dist::GradientSync> grad_sync;

  Runner(const BenchOptions& opts, std::shared_ptr<dist::Group> g) : o(opts), group(std::move(g)) {
    torch::manual_seed(0);
    model = FNO(o.model);
    model->to(torch::kCUDA);
    optimizer = std::make_unique<AdamW>(model->parameters(), AdamWOptions(8e-3).weight_decay(1e-4));
    if (group) {
      group->broadcast_from_main(model->parameters());
      grad_sync = std::make_unique<dist::GradientSync>(group, model->parameters());
    }
  }

  OffloadedStep& step_for(const offload::Policy& policy, Precision precision) {
    auto& s = steps[policy.text + " " + to_string(precision)];
    if (!s) {
      // --plan-cache names a directory ('': no cache).
      auto settings = offload_settings(o.offload, PlanCacheText::kDirectory);
      settings.policy = policy;
      s = std::make_unique<OffloadedStep>(model, settings);
    }
    return *s;
  }

  void free_memory() {
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

  // One row: steps of `policy` in `precision` on a [batch, channels, res, ...]
  // input. A step that does not fit, or fails, gives the row's status.
  BenchRow run(const offload::Policy& policy, Precision precision, int64_t res, int64_t batch,
               int64_t warmup, int64_t timed) {
    BenchRow row;
    row.policy = policy.text;
    row.precision = to_string(precision);
    const MatmulPrecisionGuard matmul(precision);
    model->options.compute_dtype(compute_dtype(precision));
    // fp16 steps as fno_train's do (TrainStep): scaled loss, unscale and check, update.
    std::optional<GradScaler> scaler;
    if (needs_loss_scaling(precision)) scaler.emplace(GradScalerOptions(), torch::kCUDA);
    row.resolution = res;
    row.batch = batch;
    if (o.model.n_modes().size() == 3) row.time_length = o.time_length;
    try {
      measure(row, step_for(policy, precision), scaler ? &*scaler : nullptr, warmup, timed);
      row.status = "ok";
    } catch (const dist::Error&) {
      throw;  // the ranks can no longer step together
    } catch (const c10::OutOfMemoryError&) {
      row.status = "oom";
    } catch (const offload::BudgetError& e) {
      row.status = std::string("over budget: ") + e.what();
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      row.status = what.find("out of memory") != std::string::npos
                       ? "oom"
                       : "error: " + what.substr(0, what.find('\n'));
    } catch (const std::exception& e) {
      row.status = std::string("error: ") + e.what();
    }
    free_memory();
    model->options.compute_dtype(torch::kFloat);
    return row;
  }

  // The row's measurements: under torchrun one GPU's baseline first, then the
  // warm-up, the timed steps (their median), a trace when asked for.
  void measure(BenchRow& row, OffloadedStep& step, GradScaler* scaler, int64_t warmup,
               int64_t timed) {
    torch::manual_seed(1);
    // [batch, channels, res, ...]: one res per spatial dim of the model (a 3D
    // model's last one the time length, when given).
    std::vector<int64_t> x_shape{row.batch, o.model.in_channels()},
        y_shape{row.batch, o.model.out_channels()};
    const size_t dims = o.model.n_modes().size();
    for (size_t d = 0; d < dims; ++d) {
      const int64_t n = d == 2 && row.time_length > 0 ? row.time_length : row.resolution;
      x_shape.push_back(n);
      y_shape.push_back(n);
    }
    const auto x = torch::randn(x_shape, torch::kCUDA);
    const auto y = torch::randn(y_shape, torch::kCUDA);
    // fno_train's step; H1Loss adds over batch entries: auto may use micro-batches.
    const auto loss_fn = [this](const at::Tensor& out, const at::Tensor& yy) {
      return loss(out, yy);
    };
    if (group) {
      // One GPU's baseline: the same step without the all-reduce, under the
      // same --cuda-graphs (its graphs go with it).
      TrainStep solo(step, *optimizer, loss_fn, scaler);
      one_gpu_baseline(row, solo, x, y, warmup, timed,
                       use_cuda_graphs(solo, step.settings().policy));
    }
    TrainStep train(step, *optimizer, loss_fn, scaler, grad_sync.get());
    const bool graphed = use_cuda_graphs(train, step.settings().policy);
    warm_up(train, x, y, warmup, graphed);
    row.cuda_graphs = graphed && train.captured(x, y);
    row.plan_seconds = step.plan_seconds();
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
    std::vector<double> ms;
    offload::StepStats sum;
    double floor_ms = 0;
    for (int64_t i = 0; i < timed; ++i) {
      const bool record = !o.timeline_dir.empty() && i == timed - 1;
      if (record) step.record_next_timeline();
      ms.push_back(timed_step(train, x, y));
      add_stats(sum, floor_ms, step.last_stats());
      row.inflight_window = step.last_stats().inflight_window;
      if (record) write_timeline(step, row.policy, row.resolution, row.batch);
    }
    if (!o.trace_path.empty() && !traced) trace_step(train, x, y);
    row.ms_per_step = median_ms(ms);
    if (group) {
      // The ranks step together; the slowest rank's median counts.
      std::vector<double> all(static_cast<size_t>(group->size()), 0.0);
      all[static_cast<size_t>(group->rank())] = row.ms_per_step;
      all = group->all_reduce_sum(all);
      row.ms_per_step = *std::max_element(all.begin(), all.end());
      row.scaling_efficiency = row.ms_per_step_one_gpu / row.ms_per_step;
    }
    row.samples_per_s = 1e3 * static_cast<double>(row.batch * row.world_size) / row.ms_per_step;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
    // (under CUDA graphs the replays allocate nothing: the captures' peak counts)
    row.peak_allocated = std::max<int64_t>(stats.allocated_bytes[0].peak, train.graph_peak_bytes());
    row.peak_reserved = stats.reserved_bytes[0].peak;
    set_link_stats(row, sum, floor_ms, static_cast<double>(timed));
    row.plan = step.plan_text();
    row.estimated_peak = step.estimate().peak_bytes;
  }

  // --cuda-graphs for a row of `policy`: whether its steps run as CUDA graphs;
  // a reason they cannot is said once per run.
  bool use_cuda_graphs(TrainStep& train, const offload::Policy& policy) {
    GraphConditions gc;
    gc.mode = o.cuda_graphs;
    gc.key = "--cuda-graphs";
    gc.device = torch::Device(torch::kCUDA, c10::cuda::current_device());
    gc.offload_policy = policy;
    gc.micro_batches = o.offload.micro_batches;
    gc.world_size = group ? group->size() : 1;
    if (group) gc.backend = group->backend_name();
    const auto decision = fno::use_cuda_graphs(train, gc);
    if (!decision.message.empty() && graph_messages.insert(decision.message).second &&
        (!group || group->is_main())) {
      std::cerr << "fno_bench: " << decision.message << std::endl;
    }
    return decision.use;
  }

  // `warmup` steps; under CUDA graphs the timed steps replay the shape's
  // graph: then on until it is captured.
  static void warm_up(TrainStep& train, const at::Tensor& x, const at::Tensor& y, int64_t warmup,
                      bool graphed) {
    for (int64_t i = 0; i < warmup; ++i) train.run(x, y);
    for (int64_t i = 0; graphed && !train.captured(x, y) && i <= TrainStep::kGraphWarmup; ++i) {
      train.run(x, y);
    }
  }

  // Several ranks: first one GPU alone (rank 0's steps without the all-reduce,
  // the other ranks waiting), the baseline of the scaling.
  void one_gpu_baseline(BenchRow& row, TrainStep& train, const at::Tensor& x, const at::Tensor& y,
                        int64_t warmup, int64_t timed, bool graphed) {
    row.world_size = group->size();
    if (group->is_main()) {
      warm_up(train, x, y, warmup, graphed);
      std::vector<double> ms1;
      for (int64_t i = 0; i < timed; ++i) ms1.push_back(timed_step(train, x, y));
      row.ms_per_step_one_gpu = median_ms(ms1);
    }
    group->barrier();
    row.ms_per_step_one_gpu =
        group->all_reduce_sum(std::vector<double>{row.ms_per_step_one_gpu})[0];
  }

  // One more step under the Kineto profiler: CPU ops and CUDA kernels (rank 0's).
  void trace_step(TrainStep& train, const at::Tensor& x, const at::Tensor& y) {
    traced_step(o.trace_path, !group || group->is_main(), [&] { train.run(x, y); });
    traced = true;
  }

  void write_timeline(OffloadedStep& step, const std::string& policy, int64_t res, int64_t batch) {
    std::string name = policy;
    std::replace(name.begin(), name.end(), ':', '_');
    std::replace(name.begin(), name.end(), '+', '_');
    const auto path = o.timeline_dir + "/timeline_" + name + "_" + std::to_string(res) + "_b" +
                      std::to_string(batch) + ".csv";
    const std::string csv = offload::timeline_csv(
        step.last_stats().timeline, "GPU memory of one training step; policy " + policy + ", " +
                                        std::to_string(res) + "x" + std::to_string(res) +
                                        ", batch " + std::to_string(batch) + ", " +
                                        at::cuda::getCurrentDeviceProperties()->name);
    write_file_atomic(path, csv.data(), csv.size());
  }
};

void log_row(const BenchRow& r, size_t dims) {
  std::cerr << "fno_bench: " << std::left << std::setw(18) << r.policy << " " << r.precision << " "
            << grid_text(r, dims) << " b" << r.batch << ": " << r.status;
  if (r.status == "ok") {
    if (r.domain_parallel > 1) {
      std::cerr << std::fixed << std::setprecision(1) << "  " << r.world_size << " ranks, "
                << r.domain_parallel << " per sample: per rank";
      for (const double ms : r.rank_ms) std::cerr << " " << ms;
      std::cerr << " ms; one GPU " << r.ms_per_step_one_gpu << " ms/step ("
                << (r.one_gpu_status.empty() ? "not run" : r.one_gpu_status) << "), speed-up "
                << std::setprecision(2) << r.speedup << "x; each rank sends "
                << offload::format_bytes(r.domain_bytes_sent) << " a step for its band (payload "
                << offload::format_bytes(r.domain_payload_bytes) << ", spectra "
                << offload::format_bytes(r.spectra_bytes) << "), "
                << offload::format_bytes(r.gradient_bytes_sent) << " for the gradients; "
                << r.domain_sums << " band sums a step, the host waited for " << r.domain_host_waits
                << ";";
    } else if (r.world_size > 1) {
      std::cerr << std::fixed << std::setprecision(1) << "  " << r.world_size
                << " ranks: " << r.samples_per_s << " samples/s, one GPU " << r.ms_per_step_one_gpu
                << " ms/step, scaling efficiency " << std::setprecision(3) << r.scaling_efficiency
                << " (" << r.scaling_efficiency * static_cast<double>(r.world_size) << "x);";
    }
    std::cerr << std::fixed << std::setprecision(1) << "  " << r.ms_per_step << " ms/step, peak "
              << offload::format_bytes(r.peak_allocated) << ", offloaded "
              << offload::format_bytes(r.bytes_offloaded) << " (prefetched "
              << offload::format_bytes(r.bytes_prefetched) << ", on demand "
              << offload::format_bytes(r.bytes_on_demand) << "), d2h " << r.d2h_gbps
              << " GB/s busy " << r.d2h_busy_ms << " ms, h2d " << r.h2d_gbps << " GB/s busy "
              << r.h2d_busy_ms << " ms, both " << r.link_overlap_ms << " ms, link floor "
              << r.link_floor_ms << " ms, waits " << r.forward_wait_ms << "/" << r.backward_wait_ms
              << " ms";
    if (r.bytes_offloaded > 0) {
      std::cerr << " (GPU idle " << r.forward_stall_ms << " ms in forward), window "
                << offload::format_bytes(r.inflight_window);
    }
    std::cerr << "; plan " << r.plan;
    if (r.cuda_graphs) std::cerr << "; CUDA graphs";
    if (r.plan_seconds > 0) std::cerr << "; plan search " << r.plan_seconds << " s";
  }
  std::cerr << std::endl;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (auto x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

}  // namespace

std::string grid_text(const BenchRow& row, size_t dims) {
  const std::string n = std::to_string(row.resolution);
  if (dims == 3 && row.time_length > 0) return n + "^2 x " + std::to_string(row.time_length);
  return n + "^" + std::to_string(dims);
}

std::vector<offload::Policy> default_bench_policies() {
  std::vector<offload::Policy> policies;
  for (const char* name : {"none", "all", "recompute+offload", "auto"}) {
    policies.push_back(offload::parse_policy(name));
  }
  return policies;
}

FNOOptions seed_model() { return FNOOptions({16, 16}, 1, 1, 32).projection_channel_ratio(2); }

void use_config(BenchOptions& o, const std::string& config_path,
                const std::vector<std::string>& overrides) {
  const auto cfg = load_config(config_path, overrides);
  o.model = cfg.model;
  o.precisions = {cfg.training.precision};
  o.cuda_graphs = cfg.training.cuda_graphs;
  o.model_source = config_path;
  // A recurrent Navier-Stokes config trains on rollouts of t_out model steps
  // (policy none only); the bench times one step of the model on its grids.
  if (cfg.data.problem == DataProblem::kNavierStokes && cfg.data.ns_mode == NsMode::kRecurrent) {
    o.model_source += "; one step of its recurrent rollout, which trains t_out of them per step";
  }
  // A space-time config trains on N x N x t_out grids.
  if (cfg.data.problem == DataProblem::kNavierStokes && cfg.data.ns_mode == NsMode::kSpaceTime &&
      cfg.model.n_modes().size() == 3 && cfg.data.t_out > 0) {
    o.time_length = cfg.data.t_out;
  }
}

std::string describe_bench(const BenchOptions& o) {
  torch::manual_seed(0);
  const FNO model(o.model);
  std::ostringstream s;
  s << "model ";
  model->pretty_print(s);
  s << " (from " << o.model_source << ")\n";
  s << "n_params " << count_params(*model) << "\n";
  s << "input [batch, " << o.model.in_channels();
  const size_t dims = o.model.n_modes().size();
  for (size_t d = 0; d < dims; ++d) {
    s << ", " << (d == 2 && o.time_length > 0 ? std::to_string(o.time_length) : "N");
  }
  s << "], N in resolutions\n";
  if (dims == 3 && o.time_length > 0) s << "time length " << o.time_length << "\n";
  s << "resolutions " << join(o.resolutions) << "\n";
  s << "batches " << join(o.batches) << "\n";
  std::string policies;
  for (const auto& p : o.policies) policies += (policies.empty() ? "" : ", ") + p.text;
  s << "policies " << policies << "\n";
  std::string precisions;
  for (const auto p : o.precisions) precisions += (precisions.empty() ? "" : ", ") + to_string(p);
  s << "precisions " << precisions << "\n";
  s << "cuda graphs " << to_string(o.cuda_graphs) << "\n";
  s << "steps " << o.warmup << " warm-up, " << o.steps << " timed (median); chunks "
    << o.offload.chunks << "\n";
  s << "in-flight window "
    << (o.offload.max_inflight_mib > 0 ? offload::format_bytes(o.offload.max_inflight_mib << 20)
                                       : std::string("auto (1 GiB, learning)"))
    << "\n";
  s << "auto budget "
    << (o.offload.gpu_memory_limit > 0 ? offload::format_bytes(o.offload.gpu_memory_limit)
                                       : "free memory")
    << "\n";
  s << "auto search at most " << o.offload.search_seconds << " s\n";
  s << "memory cap " << (o.memory_cap > 0 ? offload::format_bytes(o.memory_cap) : "none") << "\n";
  if (o.domain_parallel > 1) {
    s << "domain parallel " << o.domain_parallel
      << " ranks per sample (the whole band or tiled, measured); one GPU "
      << (o.domain_baseline ? "baseline on rank 0" : "baseline not run") << "\n";
  }
  if (o.find_largest) {
    s << "find largest grid: steps of " << o.grid_step << " up to " << o.grid_max << "\n";
  }
  return s.str();
}

void check_bench_options(const BenchOptions& o) {
  using std::to_string;
  const auto refuse = [](const std::string& why) { throw std::invalid_argument(why); };
  if (o.domain_parallel < 1) {
    refuse("--domain-parallel " + to_string(o.domain_parallel) + " must be >= 1");
  }
  if (o.domain_parallel > 1) {
    const auto env = dist::launch_env();
    const int64_t w = env ? env->world_size : 1;
    if (w % o.domain_parallel != 0) {
      refuse("--domain-parallel " + to_string(o.domain_parallel) +
             " does not divide the world size " + to_string(w) +
             " (run under torchrun with a multiple of it)");
    }
    if (o.find_largest) refuse("--find-largest runs on one GPU (not with --domain-parallel)");
  }
  if (o.find_largest) {
    if (o.memory_cap <= 0) refuse("--find-largest needs --cap (the memory to fit)");
    if (const auto env = dist::launch_env(); env && env->world_size > 1) {
      refuse("--find-largest runs on one GPU (not under torchrun)");
    }
    if (o.grid_step > o.grid_max) {
      refuse("--grid-step " + to_string(o.grid_step) + " is larger than --grid-max " +
             to_string(o.grid_max) + ": the search has no grid to try");
    }
  }
  // The widest activation of each grid, in elements: batch x channels x grid
  // points, counted in doubles (they cannot overflow) against 2^53.
  const auto& m = o.model;
  const double channels =
      std::max<double>({static_cast<double>(m.in_channels()), static_cast<double>(m.out_channels()),
                        static_cast<double>(m.hidden_channels()),
                        static_cast<double>(m.hidden_channels()) * m.lifting_channel_ratio(),
                        static_cast<double>(m.hidden_channels()) * m.projection_channel_ratio()});
  const size_t dims = m.n_modes().size();
  std::vector<int64_t> grids = o.resolutions;
  if (o.find_largest) grids.push_back(o.grid_max);
  for (const int64_t n : grids) {
    for (const int64_t b : o.batches) {
      double points = 1;
      for (size_t d = 0; d < dims; ++d) {
        points *= static_cast<double>(d == 2 && o.time_length > 0 ? o.time_length : n);
      }
      const double elements = static_cast<double>(b) * channels * points;
      if (elements > 9007199254740992.0) {
        std::ostringstream why;
        why << (o.find_largest && n == o.grid_max ? "--grid-max " : "--resolutions ") << n
            << " with --batches " << b << ": an activation of " << elements
            << " elements, over 2^53: smaller grids or batches";
        refuse(why.str());
      }
    }
  }
}

BenchResult run_bench(const BenchOptions& o) {
  // (The messages name no program: the program's error line puts its name first.)
  try {
    check_bench_options(o);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, e.what());
  }
  TORCH_CHECK(torch::cuda::is_available(),
              "no CUDA device is visible; the benchmarks run on a GPU machine (fno_train trains on "
              "the CPU)");
  // Under torchrun: one rank per GPU (LOCAL_RANK), NCCL between them.
  std::shared_ptr<dist::Group> group;
  if (const auto env = dist::launch_env(); env && env->world_size > 1) {
    TORCH_CHECK(env->local_rank < static_cast<int64_t>(torch::cuda::device_count()), "LOCAL_RANK ",
                env->local_rank, " has no GPU (", torch::cuda::device_count(), " visible)");
    TORCH_CHECK(!o.find_largest, "--find-largest runs on one GPU (not under torchrun)");
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(env->local_rank));
    dist::GroupOptions go;
    go.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.dist_timeout_s * 1000));
    group = dist::Group::create(
        *env, torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env->local_rank)), go);
  }
  BenchResult result;
  result.device = at::cuda::getCurrentDeviceProperties()->name;
  result.grid_dims = o.model.n_modes().size();
  result.device_bytes = offload::device_total_bytes();
  result.memory_cap = o.memory_cap;
  if (o.memory_cap > 0) offload::cap_device_memory(o.memory_cap);
  result.world_size = group ? group->size() : 1;
  result.rank = group ? group->rank() : 0;
  if (o.domain_parallel > 1) {
    result.rows = run_domain_rows(o, group, [&](const BenchRow& row) {
      if (result.rank == 0) log_row(row, result.grid_dims);
    });
    return result;
  }
  Runner runner(o, group);
  for (const auto precision : o.precisions) {
    for (const auto& policy : o.policies) {
      for (auto res : o.resolutions) {
        for (auto batch : o.batches) {
          result.rows.push_back(runner.run(policy, precision, res, batch, o.warmup, o.steps));
          if (result.rank == 0) log_row(result.rows.back(), result.grid_dims);
        }
      }
    }
  }
  if (o.find_largest) {
    const int64_t batch = o.batches.front();
    const auto precision = o.precisions.front();
    for (const auto& policy : o.policies) {
      // Binary search over multiples of grid_step: lo trains, hi does not.
      int64_t lo = 0, hi = o.grid_max / o.grid_step + 1;
      while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        auto row = runner.run(policy, precision, mid * o.grid_step, batch, 1, 1);
        row.policy += " (search)";
        log_row(row, result.grid_dims);
        result.rows.push_back(row);
        (row.status == "ok" ? lo : hi) = mid;
      }
      result.largest.emplace_back(policy.text, lo * o.grid_step);
      BenchRow largest_row;
      largest_row.resolution = lo * o.grid_step;
      if (result.grid_dims == 3) largest_row.time_length = o.time_length;
      std::cerr << "fno_bench: largest grid for " << policy.text << " under "
                << offload::format_bytes(o.memory_cap) << ": "
                << grid_text(largest_row, result.grid_dims) << " (batch " << batch << ")"
                << std::endl;
    }
  }
  return result;
}

std::string BenchResult::to_json(const std::string& command) const {
  std::ostringstream j;
  j << std::setprecision(6) << "{\n  \"command\": \"" << json::escape(command)
    << "\",\n  \"device\": \"" << json::escape(device)
    << "\",\n  \"device_bytes\": " << device_bytes << ",\n  \"memory_cap_bytes\": " << memory_cap;
  // The experiment overrides this process ran under, when any was set.
  if (const auto o = json::overrides_json(overrides_set()); !o.empty()) {
    j << ",\n  \"overrides\": " << o;
  }
  j << ",\n  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    j << "    {\"policy\": \"" << json::escape(r.policy) << "\", \"precision\": \"" << r.precision
      << "\", \"resolution\": " << r.resolution << ", \"time_length\": " << r.time_length
      << ", \"grid\": \"" << grid_text(r, grid_dims) << "\", \"batch\": " << r.batch
      << ", \"status\": \"" << json::escape(r.status) << "\", \"ms_per_step\": " << r.ms_per_step
      << ", \"peak_allocated_bytes\": " << r.peak_allocated
      << ", \"peak_reserved_bytes\": " << r.peak_reserved
      << ", \"bytes_offloaded\": " << r.bytes_offloaded
      << ", \"bytes_prefetched\": " << r.bytes_prefetched
      << ", \"bytes_fetched_on_demand\": " << r.bytes_on_demand
      << ", \"bytes_reused_on_device\": " << r.bytes_reused_on_device
      << ", \"d2h_gbps\": " << r.d2h_gbps << ", \"h2d_gbps\": " << r.h2d_gbps
      << ", \"d2h_busy_ms\": " << r.d2h_busy_ms << ", \"h2d_busy_ms\": " << r.h2d_busy_ms
      << ", \"forward_wait_ms\": " << r.forward_wait_ms
      << ", \"backward_wait_ms\": " << r.backward_wait_ms
      << ", \"forward_stall_ms\": " << r.forward_stall_ms
      << ", \"link_overlap_ms\": " << r.link_overlap_ms
      << ", \"link_floor_ms\": " << r.link_floor_ms
      << ", \"inflight_window_bytes\": " << r.inflight_window
      << ", \"estimated_peak_bytes\": " << r.estimated_peak
      << ", \"plan_seconds\": " << r.plan_seconds << ", \"world_size\": " << r.world_size
      << ", \"samples_per_s\": " << r.samples_per_s
      << ", \"ms_per_step_one_gpu\": " << r.ms_per_step_one_gpu
      << ", \"scaling_efficiency\": " << r.scaling_efficiency
      << ", \"cuda_graphs\": " << (r.cuda_graphs ? "true" : "false")
      << ", \"domain_parallel\": " << r.domain_parallel << ", \"rank_ms\": [";
    for (size_t k = 0; k < r.rank_ms.size(); ++k) j << (k ? ", " : "") << r.rank_ms[k];
    j << "], \"losses\": [";
    for (size_t k = 0; k < r.losses.size(); ++k) j << (k ? ", " : "") << r.losses[k];
    j << "], \"one_gpu_status\": \"" << json::escape(r.one_gpu_status)
      << "\", \"speedup\": " << r.speedup
      << ", \"domain_payload_bytes\": " << r.domain_payload_bytes
      << ", \"spectra_bytes\": " << r.spectra_bytes
      << ", \"domain_bytes_sent\": " << r.domain_bytes_sent
      << ", \"gradient_bytes_sent\": " << r.gradient_bytes_sent
      << ", \"domain_sums_per_step\": " << r.domain_sums
      << ", \"domain_host_waits_per_step\": " << r.domain_host_waits << ", \"plan\": \""
      << json::escape(r.plan) << "\"}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  j << "  ],\n  \"largest_grid\": {";
  for (size_t i = 0; i < largest.size(); ++i) {
    j << (i ? ", " : "") << "\"" << json::escape(largest[i].first) << "\": " << largest[i].second;
  }
  j << "}\n}\n";
  return j.str();
}

std::string BenchResult::to_csv() const {
  std::ostringstream c;
  c << std::setprecision(6);
  c << "device,memory_cap_bytes,policy,precision,resolution,batch,status,ms_per_step,"
       "peak_allocated_bytes,peak_reserved_bytes,bytes_offloaded,bytes_prefetched,bytes_fetched_on_"
       "demand,"
       "bytes_reused_on_device,d2h_gbps,h2d_gbps,d2h_busy_ms,h2d_busy_ms,forward_wait_ms,"
       "backward_wait_ms,estimated_peak_bytes,plan_seconds,world_size,samples_per_s,"
       "ms_per_step_one_gpu,scaling_efficiency,forward_stall_ms,inflight_window_bytes,"
       "link_overlap_ms,link_floor_ms,plan,time_length,cuda_graphs,domain_parallel,rank_ms,"
       "one_gpu_status,speedup,domain_payload_bytes,spectra_bytes,domain_bytes_sent,"
       "gradient_bytes_sent\n";
  for (const auto& r : rows) {
    c << '"' << device << "\"," << memory_cap << ",\"" << r.policy << "\"," << r.precision << ','
      << r.resolution << ',' << r.batch << ",\"" << r.status << "\"," << r.ms_per_step << ','
      << r.peak_allocated << ',' << r.peak_reserved << ',' << r.bytes_offloaded << ','
      << r.bytes_prefetched << ',' << r.bytes_on_demand << ',' << r.bytes_reused_on_device << ','
      << r.d2h_gbps << ',' << r.h2d_gbps << ',' << r.d2h_busy_ms << ',' << r.h2d_busy_ms << ','
      << r.forward_wait_ms << ',' << r.backward_wait_ms << ',' << r.estimated_peak << ','
      << r.plan_seconds << ',' << r.world_size << ',' << r.samples_per_s << ','
      << r.ms_per_step_one_gpu << ',' << r.scaling_efficiency << ',' << r.forward_stall_ms << ','
      << r.inflight_window << ',' << r.link_overlap_ms << ',' << r.link_floor_ms << ",\"" << r.plan
      << "\"," << r.time_length << "," << (r.cuda_graphs ? 1 : 0) << ',' << r.domain_parallel
      << ",\"";
    for (size_t k = 0; k < r.rank_ms.size(); ++k) c << (k ? ";" : "") << r.rank_ms[k];
    c << "\",\"" << r.one_gpu_status << "\"," << r.speedup << ',' << r.domain_payload_bytes << ','
      << r.spectra_bytes << ',' << r.domain_bytes_sent << ',' << r.gradient_bytes_sent << "\n";
  }
  return c.str();
}

}  // namespace fno
