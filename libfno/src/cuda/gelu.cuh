// GELU and its derivative for the block-tail kernels (fp32 in, fp32 out).
#pragma once

namespace fno::cuda::detail {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// GELU, in every kernel: torch::gelu's erf form with Phi(x) from Abramowitz &
// Stegun 7.1.26 (|error| <= 1.5e-7 in erf: a few fp32 ulps, far below the
// 2^-11 .. 2^-9 of the tensor-core products' operands; docs/precision.md has
// its effect on training), which shares exp(-x^2 / 2) with GELU'(x) = Phi(x) + x phi(x): about half
// the instructions of erff + expf, which dominate these kernels. (rcp.approx and ex2.approx
// directly, -log2(e) / 2 and the 1/2 of P(N > |x|) = erfc(|x| / sqrt 2) / 2 folded into the
// constants: three instructions fewer than __fdividef, __expf and the extra products.)
__device__ __forceinline__ float rcp_approx(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float ex2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float phi_cdf(float x, float& e) {
  const float t = rcp_approx(fmaf(0.3275911f * kInvSqrt2, fabsf(x), 1.f));
  e = ex2_approx(x * (x * (-0.5f * 1.44269504088896341f)));  // exp(-x^2 / 2)
  float p = fmaf(t, 0.5f * 1.061405429f, 0.5f * -1.453152027f);
  p = fmaf(t, p, 0.5f * 1.421413741f);
  p = fmaf(t, p, 0.5f * -0.284496736f);
  p = fmaf(t, p, 0.5f * 0.254829592f);
  const float q = t * p * e;  // P(N > |x|)
  return x >= 0.f ? 1.f - q : q;
}
__device__ __forceinline__ float gelu_fast(float x) {
  float e;
  return x * phi_cdf(x, e);
}
__device__ __forceinline__ void gelu_and_grad_fast(float x, float& g, float& d) {
  float e;
  const float cdf = phi_cdf(x, e);
  g = x * cdf;
  d = fmaf(x * kInvSqrt2Pi, e, cdf);
}

}  // namespace fno::cuda::detail
