#include <fno/offload_step.h>

#include <fno/staged.h>

#include <torch/torch.h>

#include <sstream>

namespace fno {

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

  void make_plan(const at::Tensor& x) {
    shape = x.sizes().vec();
    stages = fno_stages(model, x.sizes().slice(2).vec());
    if (policy.kind != offload::Policy::Kind::kAuto) {
      plan = offload::plan_for_policy(policy, stages, settings.chunks);
      return;
    }
    // Profile one batch entry with everything kept, then scale to the batch.
    auto one = x.narrow(0, 0, 1);
    profile = offload::measure_profile(
                  stages, one, [](const at::Tensor& y) { return y.pow(2).sum(); },
                  model->parameters())
                  .scaled_to_batch(x.size(0));
    const int64_t budget =
        settings.gpu_memory_limit > 0 ? settings.gpu_memory_limit : offload::device_free_bytes();
    plan = offload::plan_for_budget(profile, budget, settings.options, &estimate, &fits);
    profiled = true;
    std::cerr << profile.table() << "\n"
              << "offload auto: budget " << offload::format_bytes(budget) << ", plan "
              << plan.to_string(stages) << "; estimated peak "
              << offload::format_bytes(estimate.peak_bytes) << " (" << estimate.peak_at << "), "
              << estimate.step_ms << " ms/step"
              << (fits ? "" : "; NOTHING FITS the budget: this is the plan of least memory")
              << "\n";
  }
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
  if (x.sizes().vec() != p.shape) p.make_plan(x);
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
    o << " (estimated peak " << offload::format_bytes(p_->estimate.peak_bytes) << ", "
      << p_->estimate.step_ms << " ms/step" << (p_->fits ? "" : ", over budget") << ")";
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

std::string estimate_policies(FNO model, const at::Tensor& x, const OffloadSettings& settings) {
  const auto stages = fno_stages(model, x.sizes().slice(2).vec());
  const auto profile = offload::measure_profile(
                           stages, x.narrow(0, 0, 1),
                           [](const at::Tensor& y) { return y.pow(2).sum(); }, model->parameters())
                           .scaled_to_batch(x.size(0));
  for (const auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
  std::ostringstream o;
  o << profile.table() << "\n";
  for (const std::string name : {"none", "all", "blocks:2", "recompute", "recompute+offload"}) {
    const auto plan = offload::plan_for_policy(offload::parse_policy(name), stages, settings.chunks);
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
    << "; estimated peak " << offload::format_bytes(e.peak_bytes) << ", " << e.step_ms
    << " ms/step" << (fits ? "" : " (does not fit)") << "\n";
  return o.str();
}

}  // namespace fno
