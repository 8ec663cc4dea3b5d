#include <fno/offload_step.h>

#include <fno/staged.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <chrono>
#include <limits>
#include <sstream>
#include <tuple>

namespace fno {
namespace {

// The per-stage profile of one batch entry of x (everything kept), scaled to x's batch.
offload::Profile profile_batch(FNO& model, const std::vector<offload::Stage>& stages,
                               const at::Tensor& x) {
  return offload::measure_profile(
             stages, x.narrow(0, 0, 1), [](const at::Tensor& y) { return y.pow(2).sum(); },
             model->parameters())
      .scaled_to_batch(x.size(0));
}

}  // namespace

struct OffloadedStep::Impl {
  FNO model{nullptr};
  OffloadSettings settings;
  offload::Policy policy;
  std::unique_ptr<offload::Offloader> offloader;
  std::vector<int64_t> shape;  // of the last planned input
  std::vector<offload::Stage> stages;
  offload::Plan plan;
  offload::Profile profile;
  offload::Estimate estimate;
  bool profiled = false;
  bool fits = true;
  offload::StepStats stats;
  bool record_next = false;

  // One step under `plan` (gradients discarded): host ms and peak bytes.
  std::pair<double, int64_t> trial(const offload::Plan& trial_plan, const at::Tensor& x,
                                   const std::function<at::Tensor(const at::Tensor&)>& loss) {
    offloader->begin_step();
    const auto t0 = std::chrono::steady_clock::now();
    {
      offload::OffloadGuard guard(*offloader, offload::Level::kKeep);
      loss(offload::run_stages(stages, trial_plan, x, offloader.get())).backward();
    }
    if (x.is_cuda()) torch::cuda::synchronize();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const auto st = offloader->end_step();
    return {ms, st.peak_allocated};
  }

  void make_plan(const at::Tensor& x, const std::function<at::Tensor(const at::Tensor&)>& loss) {
    shape = x.sizes().vec();
    stages = fno_stages(model, x.sizes().slice(2).vec());
    if (policy.kind != offload::Policy::Kind::kAuto) {
      plan = offload::plan_for_policy(policy, stages, settings.chunks);
      return;
    }
    // Profile one batch entry with everything kept, scale to the batch, rank
    // the plans by the model, then measure the best few on the real batch:
    // the fastest one measured within the budget wins.
    profile = profile_batch(model, stages, x);
    const int64_t budget =
        settings.gpu_memory_limit > 0 ? settings.gpu_memory_limit : offload::device_free_bytes();
    std::cerr << profile.table() << "\n";
    // The model's best few, then the best few of a structured family that the
    // model may misjudge either way: the first k blocks recompute+offload and
    // the rest recompute, lifting offloaded or recomputed, projection kept or
    // recomputed, and uniform recompute plans, at a few chunk counts.
    auto candidates = offload::rank_plans(profile, budget, settings.options, kCandidates);
    std::vector<std::pair<offload::Plan, offload::Estimate>> family;
    const size_t n = stages.size();
    const int64_t n_blocks = static_cast<int64_t>(n) - 2;
    for (int64_t k = 0; k <= n_blocks; ++k) {
      for (auto lift : {offload::Level::kOffload, offload::Level::kRecomputeOffload,
                        offload::Level::kRecompute}) {
        for (auto proj : {offload::Level::kKeep, offload::Level::kRecompute}) {
          for (int64_t edge : {1, 2, 4}) {
            for (int64_t inner : {1, 2}) {
              if (edge > x.size(0) || inner > x.size(0)) continue;
              offload::Plan f;
              f.stages.resize(n);
              f.stages[0] = {lift, edge};
              for (int64_t b = 0; b < n_blocks; ++b) {
                f.stages[static_cast<size_t>(b + 1)] = {
                    b < k ? offload::Level::kRecomputeOffload : offload::Level::kRecompute, inner};
              }
              f.stages[n - 1] = {proj, edge};
              family.emplace_back(f, offload::estimate(profile, f, settings.options));
            }
          }
        }
      }
    }
    std::sort(family.begin(), family.end(),
              [](const auto& a, const auto& b) { return a.second.step_ms < b.second.step_ms; });
    const auto add = [&](std::pair<offload::Plan, offload::Estimate> f) {
      for (const auto& c : candidates) {
        if (c.first.to_string(stages) == f.first.to_string(stages)) return false;
      }
      candidates.push_back(std::move(f));
      return true;
    };
    size_t added = 0;
    for (auto& f : family) {
      if (added >= kFamilyTrials) break;
      if (f.second.peak_bytes <= budget * 3 / 2 && add(f)) ++added;
    }
    // Always measured: the uniform recompute plans, and the model's plan of
    // least memory (the fallback when nothing measured fits).
    for (const char* name : {"recompute", "recompute+offload"}) {
      for (int64_t chunks : {1, 2, 4}) {
        if (chunks > x.size(0)) continue;
        auto f = offload::plan_for_policy(offload::parse_policy(name), stages, chunks);
        add({f, offload::estimate(profile, f, settings.options)});
      }
    }
    {
      offload::Estimate e;
      bool model_fits = false;
      auto f = offload::plan_for_budget(profile, 1, settings.options, &e, &model_fits);
      add({f, e});
    }
    profiled = true;
    fits = false;
    double best_ms = std::numeric_limits<double>::infinity();
    int64_t least_peak = std::numeric_limits<int64_t>::max();
    offload::Plan least_plan;
    for (const auto& [cand, est] : candidates) {
      double ms = 0;
      int64_t peak = 0;
      std::string status = "ok";
      try {
        trial(cand, x, loss);  // warm-up: pinned pool, plans
        std::tie(ms, peak) = trial(cand, x, loss);
      } catch (const c10::OutOfMemoryError&) {
        status = "out of memory";
      }
      for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
      std::cerr << "offload auto: trial " << cand.to_string(stages) << ": estimated "
                << offload::format_bytes(est.peak_bytes) << ", " << est.step_ms << " ms; "
                << (status == "ok" ? "measured " + offload::format_bytes(peak) + ", " +
                                         std::to_string(ms) + " ms"
                                   : status)
                << "\n";
      if (status != "ok") continue;
      if (peak <= budget && ms < best_ms) {
        best_ms = ms;
        plan = cand;
        estimate = est;
        estimate.peak_bytes = peak;
        estimate.step_ms = ms;
        fits = true;
      }
      if (peak < least_peak) {
        least_peak = peak;
        least_plan = cand;
      }
    }
    if (!fits) {
      // Nothing measured fits: the plan of least measured peak (or, if every
      // trial failed, the model's plan of least memory).
      if (!least_plan.stages.empty()) {
        plan = least_plan;
        estimate.peak_bytes = least_peak;
      } else {
        bool model_fits = false;
        plan = offload::plan_for_budget(profile, budget, settings.options, &estimate, &model_fits);
      }
    }
    std::cerr << "offload auto: budget " << offload::format_bytes(budget) << ", plan "
              << plan.to_string(stages) << "; "
              << (fits ? "measured peak " + offload::format_bytes(estimate.peak_bytes) + ", " +
                             std::to_string(estimate.step_ms) + " ms/step"
                       : std::string("NOTHING FITS the budget: this is the plan of least memory"))
              << "\n";
  }
  static constexpr size_t kCandidates = 3;
  static constexpr size_t kFamilyTrials = 8;
};

OffloadedStep::OffloadedStep(FNO model, OffloadSettings settings) : p_(std::make_unique<Impl>()) {
  p_->model = std::move(model);
  p_->settings = std::move(settings);
  p_->policy = offload::parse_policy(p_->settings.policy);
  const bool none = p_->policy.kind == offload::Policy::Kind::kNone;
  // With policy none, an offloader that keeps everything still records the
  // memory timeline of a step on request (CUDA only).
  if (!none || offload::device_total_bytes() > 0) {
    p_->offloader = std::make_unique<offload::Offloader>(p_->settings.options);
    p_->offloader->exclude(*p_->model);
  }
}

OffloadedStep::~OffloadedStep() = default;

bool OffloadedStep::offloading() const {
  return p_->policy.kind != offload::Policy::Kind::kNone && p_->offloader != nullptr &&
         p_->offloader->active();
}

at::Tensor OffloadedStep::forward_backward(
    const at::Tensor& x, const std::function<at::Tensor(const at::Tensor&)>& loss) {
  auto& p = *p_;
  const bool none = p.policy.kind == offload::Policy::Kind::kNone;
  if (!p.offloader || (none && !p.record_next)) {
    auto l = loss(p.model->forward(x));
    l.backward();
    return l.detach();
  }
  if (x.sizes().vec() != p.shape) p.make_plan(x, loss);
  if (p.record_next) p.offloader->set_record_timeline(true);
  p.offloader->begin_step();
  at::Tensor l;
  {
    // The loss and anything outside the stages keep their tensors; each
    // stage's scope sets its own level.
    offload::OffloadGuard guard(*p.offloader, offload::Level::kKeep);
    l = loss(offload::run_stages(p.stages, p.plan, x, p.offloader.get()));
    p.offloader->mark("loss");
    l.backward();
  }
  p.stats = p.offloader->end_step();
  if (p.record_next) {
    p.offloader->set_record_timeline(false);
    p.record_next = false;
  }
  return l.detach();
}

std::string OffloadedStep::plan_text() const {
  if (p_->policy.kind == offload::Policy::Kind::kNone) return "none";
  std::ostringstream o;
  o << p_->plan.to_string(p_->stages);
  if (p_->profiled) {
    o << " (auto: " << (p_->fits ? "measured peak " : "estimated peak ")
      << offload::format_bytes(p_->estimate.peak_bytes) << ", " << p_->estimate.step_ms
      << " ms/step" << (p_->fits ? "" : ", over budget") << ")";
  }
  return o.str();
}

std::string OffloadedStep::describe() const {
  if (p_->policy.kind == offload::Policy::Kind::kNone || !p_->offloader) {
    return "offload: none";
  }
  return "offload policy " + p_->settings.policy + "; " + p_->offloader->describe();
}

const offload::StepStats& OffloadedStep::last_stats() const { return p_->stats; }
const offload::Profile& OffloadedStep::profile() const { return p_->profile; }
const offload::Estimate& OffloadedStep::estimate() const { return p_->estimate; }
void OffloadedStep::record_next_timeline() { p_->record_next = true; }

std::string OffloadedStep::out_of_memory_advice(const at::Tensor& x) {
  auto& p = *p_;
  for (auto& param : p.model->parameters()) param.mutable_grad() = at::Tensor();
  if (x.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
  const int64_t batch = x.size(0);
  try {
    const auto stages = fno_stages(p.model, x.sizes().slice(2).vec());
    const auto profile = profile_batch(p.model, stages, x);
    const int64_t capacity = p.settings.gpu_memory_limit > 0 ? p.settings.gpu_memory_limit
                                                             : offload::device_total_bytes();
    return offload::out_of_memory_advice(profile, p.settings.policy, capacity, p.settings.options);
  } catch (const std::exception&) {
    for (auto& param : p.model->parameters()) param.mutable_grad() = at::Tensor();
    return "even one batch entry does not fit to be measured; try --offload recompute+offload "
           "--set offload.chunks=" +
           std::to_string(batch) + ", or lower data.batch_size or the grid";
  }
}

std::string estimate_policies(FNO model, const at::Tensor& x, const OffloadSettings& settings) {
  const auto stages = fno_stages(model, x.sizes().slice(2).vec());
  const auto profile = profile_batch(model, stages, x);
  for (const auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
  std::ostringstream o;
  o << profile.table() << "\n";
  for (const std::string name : {"none", "all", "blocks:2", "recompute", "recompute+offload"}) {
    const auto plan =
        offload::plan_for_policy(offload::parse_policy(name), stages, settings.chunks);
    const auto e = offload::estimate(profile, plan, settings.options);
    o << "  " << name << ": estimated peak " << offload::format_bytes(e.peak_bytes) << " ("
      << e.peak_at << "), " << e.step_ms << " ms/step\n";
  }
  const int64_t budget =
      settings.gpu_memory_limit > 0 ? settings.gpu_memory_limit : offload::device_free_bytes();
  offload::Estimate e;
  bool fits = false;
  const auto plan = offload::plan_for_budget(profile, budget, settings.options, &e, &fits);
  o << "  auto (budget " << offload::format_bytes(budget) << "): " << plan.to_string(stages)
    << "; estimated peak " << offload::format_bytes(e.peak_bytes) << ", " << e.step_ms << " ms/step"
    << (fits ? "" : " (does not fit)") << "\n";
  return o.str();
}

}  // namespace fno
