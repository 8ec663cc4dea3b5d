#include "golden.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <map>
#include <stdexcept>

namespace fno::test {

std::string golden_path(const std::string& name) { return std::string(FNO_GOLDEN_DIR) + "/" + name; }

std::string out_path(const std::string& name) { return std::string(FNO_TEST_OUT_DIR) + "/" + name; }

const TensorDict& golden(const std::string& file) {
  static std::map<std::string, TensorDict> cache;
  auto it = cache.find(file);
  if (it == cache.end()) it = cache.emplace(file, load_tensor_dict(golden_path(file))).first;
  return it->second;
}

torch::Tensor golden_tensor(const std::string& file, const std::string& key) {
  const auto* t = golden(file).find(key);
  if (t == nullptr) throw std::runtime_error(file + ": no key '" + key + "'");
  return *t;
}

double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE_MESSAGE(a.sizes() == b.sizes(), "shape ", a.sizes(), " vs ", b.sizes());
  auto a64 = a.detach().to(torch::kCPU);
  auto b64 = b.detach().to(torch::kCPU);
  a64 = a64.is_complex() ? a64.to(torch::kComplexDouble) : a64.to(torch::kDouble);
  b64 = b64.is_complex() ? b64.to(torch::kComplexDouble) : b64.to(torch::kDouble);
  const double num = (a64 - b64).abs().pow(2).sum().sqrt().item<double>();
  const double den = b64.abs().pow(2).sum().sqrt().item<double>();
  if (den == 0.0) return num;
  return num / den;
}

}  // namespace fno::test
