// What the Darcy generator's two files share (darcy_gen.cpp: the GRF, the
// solve, the solved run; darcy_inputs.cpp: GrfRows and --inputs-only),
// private to fno::data.
#pragma once

#include <fno_data/darcy.h>
#include <fno_data/darcy_gen.h>

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fno::data::darcy_detail {

/// Bumped whenever the same options would give different data.
constexpr int kGeneratorVersion = 1;

/// The largest grid of inputs_only: 2^16 + 1 nodes per side (65536 cells),
/// 17 GB of float32 a sample.
constexpr int64_t kMaxInputsResolution = 65537;

/// y_j = sum_{k=0}^{K-1} c_k cos(pi k j / (n - 1)), j = 0 .. n-1, along the
/// last dim (DCT-I synthesis, the coefficients past K zero), through a real
/// inverse FFT of length 2 (n - 1). K <= n.
// c: [..., K] float64 -> [..., n] float64
torch::Tensor cosine_synthesis_last(const torch::Tensor& c, int64_t n);

/// sqrt(lambda_k) w_k1 w_k2 for k in [0, K)^2 (w_0 = 1, w_k = sqrt(2): the
/// orthonormal cosines), 0 at k = 0: grf_from_noise's weights.
// -> [K, K] float64 on `options`' device
torch::Tensor grf_weights(int64_t modes, double alpha, double tau,
                          const torch::TensorOptions& options);

/// The Darcy settings a resumable run compares (after the common ones).
std::vector<std::pair<std::string, std::string>> own_settings(const DarcyGenOptions& o);

/// The files' attributes about the GRF and the two values of the coefficient.
std::vector<Attribute> grf_attrs(const DarcyGenOptions& o);

/// validate_darcy_options' checks of inputs_only and grf_modes.
void validate_inputs_only(const DarcyGenOptions& o);

/// generate_darcy with inputs_only (validated options, the device resolved).
GenSummary generate_inputs(const DarcyGenOptions& o, const GenHooks& hooks,
                           const torch::Device& device, std::chrono::steady_clock::time_point t0);

}  // namespace fno::data::darcy_detail
