#include <fno/optim.h>

#include <torch/torch.h>

#ifdef FNO_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/adamw.h"
#include "cuda/block_tail.h"  // error_string
#endif

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace fno {

namespace {

// p = fma(step, q, p) then p = fma(decay, p, p) for fp32 CUDA parameters, with
// step and decay fp32 device scalars (cuda/adamw.h); false, having done
// nothing, for anything else (the caller takes torch's kernels).
bool apply_on_device(const std::vector<torch::Tensor>& params,
                     const std::vector<torch::Tensor>& updates, const torch::Tensor& step,
                     const torch::Tensor& decay) {
#ifdef FNO_CUDA_KERNELS
  const auto fp32_on = [&](const torch::Tensor& t) {
    return t.is_cuda() && t.scalar_type() == torch::kFloat && t.is_contiguous() &&
           t.device() == step.device();
  };
  if (!fp32_on(step) || (decay.defined() && !fp32_on(decay))) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!fp32_on(params[i]) || !fp32_on(updates[i])) return false;
  }
  const c10::cuda::CUDAGuard guard(step.device());
  const auto stream = c10::cuda::getCurrentCUDAStream(step.device().index()).stream();
  for (size_t first = 0; first < params.size(); first += cuda::kAdamWApplyTensors) {
    cuda::AdamWApplyArgs args{};
    const size_t end = std::min(params.size(), first + cuda::kAdamWApplyTensors);
    for (size_t i = first; i < end; ++i) {
      args.p[args.count] = params[i].data_ptr<float>();
      args.q[args.count] = updates[i].data_ptr<float>();
      args.n[args.count] = params[i].numel();
      ++args.count;
    }
    const int err = cuda::adamw_apply(args, step.data_ptr<float>(),
                                      decay.defined() ? decay.data_ptr<float>() : nullptr, stream);
    TORCH_CHECK(err == 0, "AdamW: the device step's kernel failed: ", cuda::error_string(err));
  }
  return true;
#else
  return false;
#endif
}

// A complex tensor as its real pairs (torch.optim.Adam's view of complex
// parameters, their gradients and moments); a real one as it is.
torch::Tensor as_real(const torch::Tensor& t) {
  return t.is_complex() ? torch::view_as_real(t) : t;
}

// The moments' updates for real tensors, m = b1 m + (1 - beta1) g and
// v = b2 v + (1 - beta2) g^2, and the step's denominators sqrt(v) / c2 + eps
// (c2 nullptr: sqrt(v) + eps, AdamW's). b1 and b2 multiply the moments: beta,
// or device tensors that are 1 on a skipped step; c2 (torch_adam's
// sqrt(1 - beta2^t)) is one scalar per tensor (host) or one device tensor.
template <typename Beta, typename C2>
std::vector<torch::Tensor> adam_denominators(const std::vector<torch::Tensor>& grads,
                                             const std::vector<torch::Tensor>& ms,
                                             const std::vector<torch::Tensor>& vs,
                                             const AdamWOptions& o, const Beta& b1, const Beta& b2,
                                             const C2& c2) {
  const auto [beta1, beta2] = o.betas();
  at::_foreach_mul_(ms, b1);
  at::_foreach_add_(ms, grads, 1.0 - beta1);
  at::_foreach_mul_(vs, b2);
  at::_foreach_addcmul_(vs, grads, grads, 1.0 - beta2);
  auto denoms = at::_foreach_sqrt(vs);
  if constexpr (!std::is_same_v<C2, std::nullptr_t>) at::_foreach_div_(denoms, c2);
  at::_foreach_add_(denoms, o.eps());
  return denoms;
}

// torch_adam's gradient g + weight_decay * p (an L2 term); with l2 (a device
// tensor, 0 on a skipped step) g + l2 * p.
std::vector<torch::Tensor> with_l2(const std::vector<torch::Tensor>& grads,
                                   const std::vector<torch::Tensor>& params, const AdamWOptions& o,
                                   const torch::Tensor& l2 = {}) {
  if (l2.defined()) return at::_foreach_add(grads, at::_foreach_mul(params, l2));
  if (o.weight_decay() > 0.0) return at::_foreach_add(grads, params, o.weight_decay());
  return grads;
}

}  // namespace

// ---------------------------------------------------------------------------
// AdamW
// ---------------------------------------------------------------------------
AdamW::AdamW(const std::vector<torch::optim::OptimizerParamGroup>& param_groups,
             AdamWOptions defaults)
    : Optimizer(param_groups, std::make_unique<AdamWOptions>(defaults)) {
  TORCH_CHECK(defaults.lr() >= 0, "AdamW: invalid learning rate ", defaults.lr(),
              " (must be >= 0)");
  TORCH_CHECK(defaults.eps() >= 0, "AdamW: invalid eps ", defaults.eps(), " (must be >= 0)");
  const auto [b1, b2] = defaults.betas();
  TORCH_CHECK(0 <= b1 && b1 < 1.0, "AdamW: invalid beta1 ", b1, " (must be in [0, 1))");
  TORCH_CHECK(0 <= b2 && b2 < 1.0, "AdamW: invalid beta2 ", b2, " (must be in [0, 1))");
  TORCH_CHECK(defaults.weight_decay() >= 0, "AdamW: invalid weight_decay ",
              defaults.weight_decay(), " (must be >= 0)");
}

torch::Tensor AdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  if (device_step_) {
    step_on_device();
    return loss;
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const AdamWOptions&>(group.options());
    const auto [beta1, beta2] = o.betas();
    // Real parameters go through multi-tensor (_foreach) kernels: a handful of
    // launches for the whole group instead of ~8 per parameter, which is what
    // a small model's step time is made of. Complex ones take the per-tensor
    // path below. The arithmetic is neuraloperator's in the same order.
    std::vector<torch::Tensor> params, grads, ms, vs;
    std::vector<at::Scalar> step_sizes, c2s;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto& grad = p.grad();
      TORCH_CHECK(!grad.is_sparse(), "AdamW does not support sparse gradients");
      auto it = state_.find(p.unsafeGetTensorImpl());
      if (it == state_.end()) {
        auto st = std::make_unique<AdamWParamState>();
        st->exp_avg(torch::zeros_like(grad, at::MemoryFormat::Preserve));
        st->exp_avg_sq(torch::zeros_like(grad, at::MemoryFormat::Preserve));
        it = state_.emplace(p.unsafeGetTensorImpl(), std::move(st)).first;
      }
      auto& st = static_cast<AdamWParamState&>(*it->second);
      st.step(st.step() + 1);
      if (o.torch_adam()) {
        // torch.optim.Adam: -lr / (1 - b1^t) and sqrt(1 - b2^t) apart; complex
        // parameters as real pairs, with the real ones.
        const double t = static_cast<double>(st.step());
        const double bc1 = o.correct_bias() ? 1.0 - std::pow(beta1, t) : 1.0;
        const double bc2 = o.correct_bias() ? 1.0 - std::pow(beta2, t) : 1.0;
        params.push_back(as_real(p));
        grads.push_back(as_real(grad));
        ms.push_back(as_real(st.exp_avg()));
        vs.push_back(as_real(st.exp_avg_sq()));
        step_sizes.emplace_back(-o.lr() / bc1);
        c2s.emplace_back(std::sqrt(bc2));
        continue;
      }
      double step_size = o.lr();
      if (o.correct_bias()) {
        const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(st.step()));
        const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(st.step()));
        step_size = step_size * std::sqrt(bc2) / bc1;
      }
      if (!grad.is_complex()) {
        params.push_back(p);
        grads.push_back(grad);
        ms.push_back(st.exp_avg());
        vs.push_back(st.exp_avg_sq());
        step_sizes.emplace_back(-step_size);
        continue;
      }
      auto& m = st.exp_avg();
      auto& v = st.exp_avg_sq();
      m.mul_(beta1).add_(grad, 1.0 - beta1);
      v.mul_(beta2).addcmul_(grad, grad.conj(), 1.0 - beta2);  // |g|^2, complex-typed
      auto denom = v.sqrt().add_(o.eps());
      p.add_(m / denom, -step_size);
      if (o.weight_decay() > 0.0) p.add_(p, -o.lr() * o.weight_decay());
    }
    if (params.empty()) continue;
    if (o.torch_adam()) {
      const auto denoms = adam_denominators(with_l2(grads, params, o), ms, vs, o, beta1, beta2,
                                            at::ArrayRef<at::Scalar>(c2s));
      at::_foreach_addcdiv_(params, ms, denoms, step_sizes);
      continue;
    }
    const auto denoms = adam_denominators(grads, ms, vs, o, beta1, beta2, nullptr);
    at::_foreach_addcdiv_(params, ms, denoms, step_sizes);
    if (o.weight_decay() > 0.0) at::_foreach_add_(params, params, -o.lr() * o.weight_decay());
  }
  return loss;
}

TensorDict AdamW::state_dict() const {
  TensorDict out;
  int64_t index = 0;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    out.insert("group." + std::to_string(g) + ".lr",
               torch::tensor(param_groups_[g].options().get_lr(), torch::kFloat64));
    for (const auto& p : param_groups_[g].params()) {
      auto it = state_.find(p.unsafeGetTensorImpl());
      if (it != state_.end()) {
        const auto& s = static_cast<const AdamWParamState&>(*it->second);
        const std::string key = "state." + std::to_string(index) + ".";
        // The device step's count stays on the device (a checkpoint's snapshot copies it).
        out.insert(key + "step", device_step_ ? device_[g].step.to(torch::kInt64)
                                              : torch::tensor(s.step(), torch::kInt64));
        out.insert(key + "exp_avg", s.exp_avg());
        out.insert(key + "exp_avg_sq", s.exp_avg_sq());
      }
      ++index;
    }
  }
  return out;
}

void AdamW::load_state_dict(const TensorDict& state) {
  torch::NoGradGuard no_grad;
  int64_t index = 0;
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    if (const auto* lr = state.find("group." + std::to_string(g) + ".lr")) {
      param_groups_[g].options().set_lr(lr->item<double>());
    }
    for (const auto& p : param_groups_[g].params()) {
      const std::string key = "state." + std::to_string(index) + ".";
      const auto* step = state.find(key + "step");
      if (step != nullptr) {
        const auto* m = state.find(key + "exp_avg");
        const auto* v = state.find(key + "exp_avg_sq");
        TORCH_CHECK(m != nullptr && v != nullptr, "AdamW state for parameter ", index,
                    " is incomplete");
        TORCH_CHECK(m->sizes() == p.sizes() && v->sizes() == p.sizes(), "AdamW state for parameter ",
                    index, " has shape ", m->sizes(), ", the parameter ", p.sizes());
        auto it = state_.find(p.unsafeGetTensorImpl());
        if (device_step_ && it != state_.end()) {
          // A captured step reads these tensors: new values, same storage.
          auto& s = static_cast<AdamWParamState&>(*it->second);
          s.step(step->item<int64_t>());
          s.exp_avg().copy_(*m);
          s.exp_avg_sq().copy_(*v);
        } else {
          auto s = std::make_unique<AdamWParamState>();
          s->step(step->item<int64_t>());
          s->exp_avg(m->to(p.options()).clone());
          s->exp_avg_sq(v->to(p.options()).clone());
          state_[p.unsafeGetTensorImpl()] = std::move(s);
        }
      }
      ++index;
    }
  }
  if (device_step_) {
    // The loaded counts and rates into the device tensors, in place.
    for (size_t g = 0; g < param_groups_.size(); ++g) {
      device_[g].step.fill_(static_cast<double>(group_step(g)));
      device_[g].lr.fill_(param_groups_[g].options().get_lr());
      device_[g].lr_written = param_groups_[g].options().get_lr();
    }
  }
}

int64_t AdamW::group_step(size_t g) const {
  std::optional<int64_t> common;
  bool unstepped = false;
  for (const auto& p : param_groups_[g].params()) {
    auto it = state_.find(p.unsafeGetTensorImpl());
    if (it == state_.end()) {
      unstepped = true;
      continue;
    }
    const int64_t t = static_cast<const AdamWParamState&>(*it->second).step();
    if (common && *common != t) {
      throw std::invalid_argument("AdamW: the parameters of group " + std::to_string(g) +
                                  " have different step counts (" + std::to_string(*common) +
                                  " and " + std::to_string(t) +
                                  "); the device step needs one count per group");
    }
    common = t;
  }
  if (common && unstepped && *common != 0) {
    throw std::invalid_argument("AdamW: some parameters of group " + std::to_string(g) +
                                " have stepped " + std::to_string(*common) +
                                " times, others never; the device step needs one count per group");
  }
  return common.value_or(0);
}

void AdamW::set_device_step(bool on) {
  if (on == device_step_) return;
  if (on) {
    std::vector<DeviceGroup> groups;
    for (size_t g = 0; g < param_groups_.size(); ++g) {
      const auto& group = param_groups_[g];
      TORCH_CHECK(!group.params().empty(), "AdamW: group ", g, " has no parameters");
      const auto f64 =
          torch::TensorOptions().dtype(torch::kDouble).device(group.params().front().device());
      DeviceGroup d;
      d.lr_written = group.options().get_lr();
      d.lr = torch::full({}, d.lr_written, f64);
      d.step = torch::full({}, static_cast<double>(group_step(g)), f64);
      groups.push_back(std::move(d));
    }
    device_ = std::move(groups);
    device_step_ = true;
    return;
  }
  // Back to the host: each parameter's count is its group's.
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto t = static_cast<int64_t>(std::llround(device_[g].step.item<double>()));
    for (const auto& p : param_groups_[g].params()) {
      auto it = state_.find(p.unsafeGetTensorImpl());
      if (it != state_.end()) static_cast<AdamWParamState&>(*it->second).step(t);
    }
  }
  device_.clear();
  device_step_ = false;
}

void AdamW::write_lr() {
  for (size_t g = 0; g < device_.size(); ++g) {
    const double lr = param_groups_[g].options().get_lr();
    if (lr == device_[g].lr_written) continue;
    device_[g].lr.fill_(lr);
    device_[g].lr_written = lr;
  }
}

void AdamW::step_on_device(const torch::Tensor& keep_in) {
  TORCH_CHECK(device_step_, "AdamW::step_on_device: call set_device_step(true) first");
  torch::NoGradGuard no_grad;
  write_lr();
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    auto& group = param_groups_[g];
    const auto& o = static_cast<const AdamWOptions&>(group.options());
    const auto [beta1, beta2] = o.betas();
    auto& d = device_[g];
    std::vector<torch::Tensor> params, grads, ms, vs, complex_params;
    int64_t index = 0;
    for (auto& p : group.params()) {
      TORCH_CHECK(p.grad().defined(),
                  "AdamW: the device step needs a gradient for every "
                  "parameter; parameter ",
                  index, " of group ", g, " has none");
      TORCH_CHECK(!p.grad().is_sparse(), "AdamW does not support sparse gradients");
      auto it = state_.find(p.unsafeGetTensorImpl());
      if (it == state_.end()) {
        auto st = std::make_unique<AdamWParamState>();
        st->exp_avg(torch::zeros_like(p.grad(), at::MemoryFormat::Preserve));
        st->exp_avg_sq(torch::zeros_like(p.grad(), at::MemoryFormat::Preserve));
        it = state_.emplace(p.unsafeGetTensorImpl(), std::move(st)).first;
      }
      auto& st = static_cast<AdamWParamState&>(*it->second);
      if (p.grad().is_complex() && !o.torch_adam()) {
        complex_params.push_back(p);
      } else {
        params.push_back(as_real(p));
        grads.push_back(as_real(p.grad()));
        ms.push_back(as_real(st.exp_avg()));
        vs.push_back(as_real(st.exp_avg_sq()));
      }
      ++index;
    }
    // keep: [] float, 1 steps, 0 skips. A skipped step's gradients (not
    // finite) become zeros, so that the moments' updates below add nothing.
    torch::Tensor keep;
    if (keep_in.defined()) {
      keep = keep_in.reshape({});
      const auto skip = keep == 0;
      for (auto& p : group.params()) p.mutable_grad().masked_fill_(skip, 0);
    }
    // The step count and the step size lr * sqrt(1 - b2^t) / (1 - b1^t), in
    // float64 as on the host; 0 for a skipped step.
    if (keep.defined()) {
      d.step.add_(keep);
    } else {
      d.step.add_(1);
    }
    auto step_size = d.lr;
    torch::Tensor c2;  // torch_adam: sqrt(1 - b2^t)
    if (o.correct_bias()) {
      const auto t = keep.defined() ? d.step.clamp_min(1) : d.step;
      const auto bc1 = 1.0 - torch::pow(beta1, t);
      const auto bc2 = 1.0 - torch::pow(beta2, t);
      if (o.torch_adam()) {
        step_size = d.lr / bc1;
        c2 = bc2.sqrt();
      } else {
        step_size = d.lr * bc2.sqrt() / bc1;
      }
    } else if (o.torch_adam()) {
      c2 = torch::ones_like(d.lr);
    }
    if (keep.defined()) step_size = step_size * keep;
    // AdamW's decoupled decay, -lr * weight_decay (0 on a skipped step).
    torch::Tensor decay;
    if (!o.torch_adam() && o.weight_decay() > 0.0) {
      decay = d.lr * -o.weight_decay();
      if (keep.defined()) decay = decay * keep;
    }
    // A skipped step multiplies the moments by 1 instead of beta.
    const auto moment_factor = [&](double beta) -> torch::Tensor {
      return torch::where(keep > 0, beta, 1.0).to(torch::kFloat);
    };
    std::optional<torch::Tensor> b1, b2;
    if (keep.defined()) {
      b1 = moment_factor(beta1);
      b2 = moment_factor(beta2);
    }
    if (!params.empty() && o.torch_adam()) {
      const auto dtype = params.front().scalar_type();
      const auto neg_step = (-step_size).to(dtype);
      // The L2 term: weight_decay, or keep * weight_decay on a step that may skip.
      torch::Tensor l2;
      if (keep.defined() && o.weight_decay() > 0.0) l2 = (keep * o.weight_decay()).to(dtype);
      const auto c2_t = c2.to(dtype);
      const auto g = with_l2(grads, params, o, l2);
      const auto denoms = b1 ? adam_denominators(g, ms, vs, o, *b1, *b2, c2_t)
                             : adam_denominators(g, ms, vs, o, beta1, beta2, c2_t);
      auto updates = at::_foreach_div(ms, denoms);
      if (!apply_on_device(params, updates, neg_step, {})) {
        at::_foreach_mul_(updates, neg_step);
        at::_foreach_add_(params, updates);
      }
    } else if (!params.empty()) {
      const auto dtype = params.front().scalar_type();
      const auto neg_step = (-step_size).to(dtype);
      const auto denoms = b1 ? adam_denominators(grads, ms, vs, o, *b1, *b2, nullptr)
                             : adam_denominators(grads, ms, vs, o, beta1, beta2, nullptr);
      auto updates = at::_foreach_div(ms, denoms);
      const auto decay_t = decay.defined() ? decay.to(dtype) : torch::Tensor();
      // p + s * q and p + a * p, each one rounding as the host step's kernels
      // round them (a fused multiply-add) on CUDA; two elsewhere, as there.
      if (!apply_on_device(params, updates, neg_step, decay_t)) {
        at::_foreach_mul_(updates, neg_step);
        at::_foreach_add_(params, updates);
        if (decay_t.defined()) at::_foreach_add_(params, at::_foreach_mul(params, decay_t));
      }
    }
    for (auto& p : complex_params) {
      auto& st = static_cast<AdamWParamState&>(*state_.at(p.unsafeGetTensorImpl()));
      const auto& grad = p.grad();
      auto& m = st.exp_avg();
      auto& v = st.exp_avg_sq();
      const auto real = c10::toRealValueType(p.scalar_type());
      if (b1) {
        m.mul_(*b1);
        v.mul_(*b2);
      } else {
        m.mul_(beta1);
        v.mul_(beta2);
      }
      m.add_(grad, 1.0 - beta1);
      v.addcmul_(grad, grad.conj(), 1.0 - beta2);  // |g|^2, complex-typed
      auto denom = v.sqrt().add_(o.eps());
      p.add_(m / denom * (-step_size).to(real));
      if (o.weight_decay() > 0.0) p.add_(p * decay.to(real));
    }
  }
}

// ---------------------------------------------------------------------------
// LRScheduler
// ---------------------------------------------------------------------------
LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer) : optimizer_(optimizer) {
  base_lrs_ = get_last_lr();
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> lrs;
  for (const auto& g : optimizer_.param_groups()) lrs.push_back(g.options().get_lr());
  return lrs;
}

void LRScheduler::set_lrs(const std::vector<double>& lrs) {
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size() && i < lrs.size(); ++i) groups[i].options().set_lr(lrs[i]);
}

TensorDict LRScheduler::state_dict() const {
  TensorDict out;
  out.insert("last_epoch", torch::tensor(last_epoch_, torch::kInt64));
  for (size_t i = 0; i < base_lrs_.size(); ++i) {
    out.insert("base_lr." + std::to_string(i), torch::tensor(base_lrs_[i], torch::kFloat64));
  }
  return out;
}

void LRScheduler::load_state_dict(const TensorDict& state) {
  if (const auto* e = state.find("last_epoch")) last_epoch_ = e->item<int64_t>();
  for (size_t i = 0; i < base_lrs_.size(); ++i) {
    if (const auto* b = state.find("base_lr." + std::to_string(i))) base_lrs_[i] = b->item<double>();
  }
}

// ---------------------------------------------------------------------------
// StepLR
// ---------------------------------------------------------------------------
StepLR::StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  TORCH_CHECK(step_size > 0, "StepLR: step_size must be > 0, got ", step_size);
}

void StepLR::step(std::optional<double>) {
  ++last_epoch_;
  if (last_epoch_ % step_size_ != 0) return;
  auto lrs = get_last_lr();
  for (auto& lr : lrs) lr *= gamma_;
  set_lrs(lrs);
}

std::string StepLR::describe() const {
  std::ostringstream s;
  s << "StepLR(step_size=" << step_size_ << ", gamma=" << gamma_ << ")";
  return s.str();
}

// ---------------------------------------------------------------------------
// CosineAnnealingLR
// ---------------------------------------------------------------------------
CosineAnnealingLR::CosineAnnealingLR(torch::optim::Optimizer& optimizer, int64_t t_max,
                                     double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  TORCH_CHECK(t_max > 0, "CosineAnnealingLR: T_max must be > 0, got ", t_max);
}

void CosineAnnealingLR::step(std::optional<double>) {
  ++last_epoch_;
  const int64_t e = last_epoch_;
  const double t = static_cast<double>(t_max_);
  auto lrs = get_last_lr();
  // Python's modulo: the result takes the sign of the divisor.
  const int64_t period = 2 * t_max_;
  const int64_t r = ((e - 1 - t_max_) % period + period) % period;
  for (size_t i = 0; i < lrs.size(); ++i) {
    if (r == 0) {
      lrs[i] = lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(M_PI / t)) / 2;
    } else {
      lrs[i] = (1 + std::cos(M_PI * static_cast<double>(e) / t)) /
                   (1 + std::cos(M_PI * static_cast<double>(e - 1) / t)) * (lrs[i] - eta_min_) +
               eta_min_;
    }
  }
  set_lrs(lrs);
}

std::string CosineAnnealingLR::describe() const {
  std::ostringstream s;
  s << "CosineAnnealingLR(T_max=" << t_max_ << ", eta_min=" << eta_min_ << ")";
  return s.str();
}

// ---------------------------------------------------------------------------
// ReduceLROnPlateau
// ---------------------------------------------------------------------------
ReduceLROnPlateau::ReduceLROnPlateau(torch::optim::Optimizer& optimizer,
                                     ReduceLROnPlateauOptions options)
    : LRScheduler(optimizer), options_(std::move(options)) {
  TORCH_CHECK(options_.factor() < 1.0, "ReduceLROnPlateau: factor must be < 1, got ",
              options_.factor());
  TORCH_CHECK(options_.mode() == "min" || options_.mode() == "max",
              "ReduceLROnPlateau: mode must be min or max, got '", options_.mode(), "'");
  TORCH_CHECK(options_.threshold_mode() == "rel" || options_.threshold_mode() == "abs",
              "ReduceLROnPlateau: threshold_mode must be rel or abs, got '",
              options_.threshold_mode(), "'");
  best_ = options_.mode() == "min" ? std::numeric_limits<double>::infinity()
                                   : -std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  const bool rel = options_.threshold_mode() == "rel";
  if (options_.mode() == "min") {
    return rel ? a < best * (1.0 - options_.threshold()) : a < best - options_.threshold();
  }
  return rel ? a > best * (options_.threshold() + 1.0) : a > best + options_.threshold();
}

void ReduceLROnPlateau::step(std::optional<double> metric) {
  TORCH_CHECK(metric.has_value(), "ReduceLROnPlateau.step() needs the monitored metric");
  const double current = *metric;
  ++last_epoch_;
  if (is_better(current, best_)) {
    best_ = current;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > options_.patience()) {
    auto lrs = get_last_lr();
    for (auto& lr : lrs) {
      const double new_lr = std::max(lr * options_.factor(), options_.min_lr());
      if (lr - new_lr > options_.eps()) lr = new_lr;
    }
    set_lrs(lrs);
    cooldown_counter_ = options_.cooldown();
    num_bad_epochs_ = 0;
  }
}

std::string ReduceLROnPlateau::describe() const {
  std::ostringstream s;
  s << "ReduceLROnPlateau(mode=" << options_.mode() << ", factor=" << options_.factor()
    << ", patience=" << options_.patience() << ", threshold=" << options_.threshold() << " "
    << options_.threshold_mode() << ", cooldown=" << options_.cooldown()
    << ", min_lr=" << options_.min_lr() << ")";
  return s.str();
}

TensorDict ReduceLROnPlateau::state_dict() const {
  auto out = LRScheduler::state_dict();
  out.insert("best", torch::tensor(best_, torch::kFloat64));
  out.insert("num_bad_epochs", torch::tensor(num_bad_epochs_, torch::kInt64));
  out.insert("cooldown_counter", torch::tensor(cooldown_counter_, torch::kInt64));
  return out;
}

void ReduceLROnPlateau::load_state_dict(const TensorDict& state) {
  LRScheduler::load_state_dict(state);
  if (const auto* b = state.find("best")) best_ = b->item<double>();
  if (const auto* n = state.find("num_bad_epochs")) num_bad_epochs_ = n->item<int64_t>();
  if (const auto* c = state.find("cooldown_counter")) cooldown_counter_ = c->item<int64_t>();
}

torch::Tensor clip_grad_norm_(const std::vector<torch::Tensor>& params, double max_norm) {
  TORCH_CHECK(max_norm > 0, "clip_grad_norm_: max_norm must be > 0, got ", max_norm);
  // The gradients as real tensors grouped by dtype, each group one fused
  // _foreach_norm and one _foreach_mul_ (a complex tensor takes the foreach
  // kernels' slow path, one kernel per tensor; its real view, whose 2-norm is
  // sqrt(sum |g|^2), does not), as torch's Python clip_grad_norm_ groups them.
  std::vector<std::vector<torch::Tensor>> groups;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    auto g = p.grad().is_complex() ? at::view_as_real(p.grad()) : p.grad();
    auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& group) {
      return group.front().scalar_type() == g.scalar_type() && group.front().device() == g.device();
    });
    if (same == groups.end()) {
      groups.emplace_back();
      same = std::prev(groups.end());
    }
    same->push_back(std::move(g));
  }
  if (groups.empty()) return {};
  std::vector<torch::Tensor> norms;
  for (const auto& group : groups) {
    for (const auto& n : at::_foreach_norm(group, 2)) norms.push_back(n.to(torch::kFloat));
  }
  auto total = at::linalg_vector_norm(torch::stack(norms), 2);
  if (std::isinf(max_norm)) return total;
  const auto coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
  for (auto& group : groups) at::_foreach_mul_(group, coef);
  return total;
}

}  // namespace fno
