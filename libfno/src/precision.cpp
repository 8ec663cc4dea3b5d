#include <fno/precision.h>

#include <ATen/Context.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <utility>

namespace fno {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFP32;
  if (name == "tf32") return Precision::kTF32;
  if (name == "bf16") return Precision::kBF16;
  if (name == "fp16") return Precision::kFP16;
  throw std::invalid_argument("unknown precision '" + name +
                              "' (expected fp32, tf32, bf16 or fp16)");
}

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kFP32:
      return "fp32";
    case Precision::kTF32:
      return "tf32";
    case Precision::kBF16:
      return "bf16";
    case Precision::kFP16:
      return "fp16";
  }
  return "?";
}

c10::ScalarType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::kBF16:
      return torch::kBFloat16;
    case Precision::kFP16:
      return torch::kHalf;
    default:
      return torch::kFloat;
  }
}

bool needs_loss_scaling(Precision precision) { return precision == Precision::kFP16; }

MatmulPrecisionGuard::MatmulPrecisionGuard(Precision precision)
    : previous_cublas_(at::globalContext().allowTF32CuBLAS()),
      previous_cudnn_(at::globalContext().allowTF32CuDNN()) {
  const bool tf32 = precision == Precision::kTF32;
  at::globalContext().setAllowTF32CuBLAS(tf32);
  at::globalContext().setAllowTF32CuDNN(tf32);
}

MatmulPrecisionGuard::~MatmulPrecisionGuard() {
  at::globalContext().setAllowTF32CuBLAS(previous_cublas_);
  at::globalContext().setAllowTF32CuDNN(previous_cudnn_);
}

// ---------------------------------------------------------------------------
// GradScaler
// ---------------------------------------------------------------------------
GradScaler::GradScaler(GradScalerOptions options, torch::Device device) : options_(options) {
  TORCH_CHECK(options_.init_scale() > 0, "GradScaler: init_scale must be > 0, got ",
              options_.init_scale());
  TORCH_CHECK(options_.growth_factor() > 1.0, "GradScaler: growth_factor must be > 1, got ",
              options_.growth_factor());
  TORCH_CHECK(options_.backoff_factor() > 0 && options_.backoff_factor() < 1.0,
              "GradScaler: backoff_factor must be in (0, 1), got ", options_.backoff_factor());
  TORCH_CHECK(options_.growth_interval() >= 1, "GradScaler: growth_interval must be >= 1, got ",
              options_.growth_interval());
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  scale_ = torch::full({1}, options_.init_scale(), f32);
  growth_tracker_ = torch::zeros({1}, f32.dtype(torch::kInt));
  found_inf_ = torch::zeros({1}, f32);
  skipped_device_ = torch::zeros({1}, f32.dtype(torch::kDouble));
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  return loss * scale_.to(loss.device(), /*non_blocking=*/true).squeeze();
}

torch::Tensor GradScaler::unscaled(const torch::Tensor& scaled_loss) const {
  return scaled_loss / scale_.to(scaled_loss.device(), /*non_blocking=*/true).squeeze();
}

void GradScaler::unscale_and_check(const std::vector<torch::Tensor>& params) {
  found_inf_.zero_();
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    const auto& g = p.grad();
    if (!g.defined()) continue;
    TORCH_CHECK(g.device() == scale_.device(), "GradScaler: a gradient on ", g.device(),
                ", the scaler on ", scale_.device());
    // Complex gradients through their real view: both parts are unscaled and checked.
    grads.push_back(g.is_complex() ? torch::view_as_real(g) : g);
  }
  const auto inv_scale = scale_.reciprocal();
  if (!grads.empty()) at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
}

bool GradScaler::unscale(const std::vector<torch::Tensor>& params) {
  unscale_and_check(params);
  if (found_inf_sum_) {
    // Any rank's non-finite gradient skips the step on every rank.
    found_inf_sum_(found_inf_);
    found_inf_.clamp_max_(1.0);
  }
  const bool finite = found_inf_.item<float>() == 0.0f;
  if (!finite) ++skipped_;
  return finite;
}

torch::Tensor GradScaler::unscale_on_device(const std::vector<torch::Tensor>& params) {
  TORCH_CHECK(!found_inf_sum_,
              "GradScaler: unscale_on_device cannot add the found-inf flag over ranks (a CUDA "
              "graph takes no collective); use unscale()");
  unscale_and_check(params);
  skipped_device_.add_(found_inf_);
  return 1.0 - found_inf_;
}

int64_t GradScaler::skipped_steps() const {
  return skipped_ + static_cast<int64_t>(std::llround(skipped_device_.item<double>()));
}

void GradScaler::set_found_inf_sum(std::function<void(torch::Tensor&)> sum) {
  found_inf_sum_ = std::move(sum);
}

void GradScaler::update() {
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor(),
                         options_.backoff_factor(), options_.growth_interval());
  found_inf_.zero_();
}

double GradScaler::scale_value() const { return scale_.item<double>(); }

std::vector<std::pair<std::string, torch::Tensor>> GradScaler::state() const {
  return {{"scale", scale_.cpu()},
          {"growth_tracker", growth_tracker_.cpu()},
          {"skipped", torch::tensor(skipped_steps(), torch::kLong)}};
}

void GradScaler::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  for (const auto& [key, value] : state) {
    if (key == "scale") {
      TORCH_CHECK(value.numel() == 1 && value.item<double>() > 0,
                  "GradScaler: the saved scale must be one positive number, got ", value);
      scale_.copy_(value.reshape({1}));
    } else if (key == "growth_tracker") {
      growth_tracker_.copy_(value.reshape({1}));
    } else if (key == "skipped") {
      skipped_ = value.item<int64_t>();
      skipped_device_.zero_();
    } else {
      TORCH_CHECK(false, "GradScaler: unknown state entry '", key, "'");
    }
  }
}

}  // namespace fno
