#include "predict_support.h"

#include <fno/losses.h>
#include <fno_train/predict.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "dict_prefix.h"
#include "json.h"

#include <filesystem>
#include <optional>
#include <stdexcept>

namespace fno::detail {

bool has_prefix(const TensorDict& d, const std::string& prefix) {
  for (const auto& item : d) {
    if (item.key().rfind(prefix, 0) == 0) return true;
  }
  return false;
}

FNO load_model_weights(const FNOOptions& options, Precision precision, const std::string& path,
                       const std::string& settings, torch::Device device, TensorDict& file) {
  file = load_tensor_dict(path);
  FNO model(FNOOptions(options).compute_dtype(compute_dtype(precision)));
  try {
    load_state_dict(*model, has_prefix(file, "model.") ? with_prefix(file, "model.") : file);
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    throw std::runtime_error(path + " does not match " + settings + ": " +
                             msg.substr(0, msg.find('\n')));
  }
  model->to(device);
  model->eval();
  return model;
}

std::string load_normalizers(const RunConfig& cfg, const std::string& run_dir,
                             const TensorDict& weights_file, const std::string& weights_path,
                             data::UnitGaussianNormalizer& in, data::UnitGaussianNormalizer& out) {
  const bool need_in = cfg.data.encode_input, need_out = cfg.data.encode_output;
  if (!need_in && !need_out) return "";
  std::optional<TensorDict> found;
  std::string source;
  if (has_prefix(weights_file, "norm.")) {
    found = weights_file;
    source = weights_path;
  } else {
    for (const std::string name : {"normalizers.pt", "checkpoint_latest.pt"}) {
      const std::string path = run_dir + "/" + name;
      if (!std::filesystem::exists(path)) continue;
      found = load_tensor_dict(path);
      source = path;
      break;
    }
  }
  if (!found) {
    throw std::runtime_error(run_dir + ": the run normalizes its " +
                             std::string(need_in ? "inputs" : "outputs") +
                             " (data.encode_*), but neither normalizers.pt nor "
                             "checkpoint_latest.pt is there to say how");
  }
  auto take = [&](const std::string& prefix, data::UnitGaussianNormalizer& norm) {
    const auto* mean = found->find(prefix + "mean");
    const auto* sd = found->find(prefix + "std");
    if (mean == nullptr || sd == nullptr) {
      throw std::runtime_error(source + ": no " + prefix + "mean/std, which " + run_dir +
                               "/config.yaml's data.encode_* needs");
    }
    norm = data::UnitGaussianNormalizer(cfg.data.normalization);
    norm.set_state(mean->to(torch::kFloat), sd->to(torch::kFloat));
  };
  if (need_in) take("norm.in.", in);
  if (need_out) take("norm.out.", out);
  return source;
}

void check_normalizer_grid(const data::UnitGaussianNormalizer& norm, const char* which,
                           at::IntArrayRef grid, const std::string& input) {
  if (!norm.fitted() || norm.mode() != data::NormalizerMode::kPointwise) return;
  const auto fitted = norm.mean().sizes().slice(2);
  if (fitted != grid) {
    throw std::runtime_error(
        input + ": the run's " + which +
        " normalizer is pointwise (data.normalization) and was fitted at " + grid_text(fitted) +
        "; it cannot apply at " + grid_text(grid) +
        " (predict at the training grid, or train with channel normalization)");
  }
}

torch::Device pick_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  if (name == "auto")
    return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::kCPU;
  if (name.rfind("cuda", 0) != 0) {
    throw PredictUsageError("--device: expected auto, cpu, cuda or cuda:N, got '" + name + "'");
  }
  if (!torch::cuda::is_available()) {
    throw PredictUsageError("--device: '" + name + "' asked for, but no CUDA device is visible");
  }
  torch::Device d(name);
  if (d.index() < 0) d = torch::Device(torch::kCUDA, 0);
  if (d.index() >= static_cast<int>(torch::cuda::device_count())) {
    throw PredictUsageError("--device: '" + name + "', but only " +
                            std::to_string(torch::cuda::device_count()) +
                            " CUDA device(s) are visible");
  }
  return d;
}

void reword_budget(const ForwardBudgetError& e) {
  using L = ForwardBudgetError::Limit;
  if (e.limit() == L::kTileRows) throw PredictUsageError("--tile-rows: " + e.detail());
  throw std::runtime_error(
      (e.limit() == L::kGpuMemory ? "--gpu-memory-limit " : "--host-memory-limit ") + e.detail());
}

torch::Tensor band_error_sums(const Band& band, int64_t grid_rows, const torch::Tensor& out,
                              const torch::Tensor& y) {
  const auto sq = [](const torch::Tensor& t) { return t.pow(2).flatten(2).sum(-1); };  // [B, C]
  const auto yd = y.to(torch::kDouble);
  const auto e = out.to(torch::kDouble) - yd;
  const int64_t c = e.size(1), n = e.size(2);
  // both: [B, 2C, n + 2, *S'] (e, then y, with a halo row each side)
  const auto both = band_halo(band, torch::cat({e, yd}, 1), 1);
  const auto d0 = sq((both.narrow(2, 2, n) - both.narrow(2, 0, n)) *
                     (static_cast<double>(grid_rows) / 2.0));  // [B, 2C]
  auto de2 = d0.narrow(1, 0, c), dy2 = d0.narrow(1, c, c);
  for (int64_t dim = 3; dim < e.dim(); ++dim) {
    const double h = 1.0 / static_cast<double>(e.size(dim));
    de2 = de2 + sq(finite_diff_first(e, dim, h, /*periodic=*/true));
    dy2 = dy2 + sq(finite_diff_first(yd, dim, h, /*periodic=*/true));
  }
  // sums: [4, B, C]
  auto sums = torch::stack({sq(e), sq(yd), de2, dy2}).contiguous();
  if (band.split()) band.sum(sums);
  return sums.cpu();
}

std::string json_array(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + json::number(v[i]);
  return s + "]";
}

data::Attribute text_attr(const std::string& name, const std::string& text) {
  data::Attribute a;
  a.name = name;
  a.text = text;
  return a;
}

data::Attribute number_attr(const std::string& name, double v) {
  data::Attribute a;
  a.name = name;
  a.number = v;
  a.is_number = true;
  return a;
}

}  // namespace fno::detail
