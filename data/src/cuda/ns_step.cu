// The fused Navier-Stokes step (ns_step.h). The three kernels are
// memory-bound passes over the batch: a thread owns one spectrum position (or
// one 16-byte vector of grid points), reads that position's table entries
// once and walks kSamples samples of the batch, loading all of them before it
// stores (bytes in flight), so the tables cost one read a step, not one per
// sample. Products and sums use the _rn intrinsics, which nvcc does not
// contract into fused multiply-adds: each is rounded as LibTorch's kernels
// round it (its complex products are (ac - bd, ad + bc); the tables' other
// parts are zero, so where LibTorch's compiler contracts, the result is the
// same). The transforms are cuFFT's, on plans made once per stepper with a
// caller-owned work area, their stream set at every call (as a CUDA graph
// captures them on its side stream).
#include "ns_step.h"

#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <cstdint>

namespace fno::data::cuda {
namespace {

constexpr int kThreads = 256;
// Samples a thread walks in the spectra and update kernels (grid.y covers the rest).
constexpr int kSamples = 8;
// Samples a thread walks in the advection kernel (four fields a sample).
constexpr int kAdvSamples = 4;

template <typename T>
struct Complex;
template <>
struct Complex<float> {
  using type = float2;
};
template <>
struct Complex<double> {
  using type = double2;
};

// 16 bytes of reals: the advection kernel's vector, loaded and stored as a
// native vector type (one 16-byte access), used as an array.
template <typename T>
struct Native;
template <>
struct Native<float> {
  using type = float4;
};
template <>
struct Native<double> {
  using type = double2;
};
template <typename T>
struct alignas(16) Vec {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
  __device__ __forceinline__ static Vec load(const T* p) {
    const auto x = *reinterpret_cast<const typename Native<T>::type*>(p);
    Vec r;
    memcpy(r.v, &x, sizeof(x));
    return r;
  }
  __device__ __forceinline__ void store(T* p) const;
};
template <>
__device__ __forceinline__ void Vec<float>::store(float* p) const {
  __stcg(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
}
template <>
__device__ __forceinline__ void Vec<double>::store(double* p) const {
  __stcg(reinterpret_cast<double2*>(p), make_double2(v[0], v[1]));
}

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }

// a b as c10::complex computes it: (ac - bd, ad + bc), each operation rounded.
template <typename C>
__device__ __forceinline__ C cmul(C a, C b) {
  C r;
  r.x = sub_rn(mul_rn(a.x, b.x), mul_rn(a.y, b.y));
  r.y = add_rn(mul_rn(a.x, b.y), mul_rn(a.y, b.x));
  return r;
}

// spectra[q, b, p] = coef[q, p] w_hat[b, p], q = 0..3, p < s = R (R/2+1);
// samples blockIdx.y * kSamples ...
template <typename T>
__global__ void __launch_bounds__(kThreads)
    spectra_kernel(const typename Complex<T>::type* __restrict__ w_hat,
                   const typename Complex<T>::type* __restrict__ coef,
                   typename Complex<T>::type* __restrict__ spectra, int64_t s, int64_t batch) {
  using C = typename Complex<T>::type;
  const int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (p >= s) return;
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * kSamples;
  const int n = batch - b0 < kSamples ? static_cast<int>(batch - b0) : kSamples;
  C c[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) c[q] = __ldg(coef + q * s + p);
  C w[kSamples];
#pragma unroll
  for (int j = 0; j < kSamples; ++j) {
    if (j < n) w[j] = w_hat[(b0 + j) * s + p];
  }
  const int64_t plane = batch * s;
#pragma unroll
  for (int j = 0; j < kSamples; ++j) {
    if (j < n) {
#pragma unroll
      for (int q = 0; q < 4; ++q) spectra[q * plane + (b0 + j) * s + p] = cmul(c[q], w[j]);
    }
  }
}

// advection[b, i] = (minus_f[i] + u wx) + v wy (u wx + v wy without minus_f),
// fields [4, B, n]: u, v, wx, wy; i < n = R^2, a Vec at a time.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    advection_kernel(const T* __restrict__ fields, const T* __restrict__ minus_f,
                     T* __restrict__ advection, int64_t n, int64_t batch) {
  using V = Vec<T>;
  constexpr int kN = V::kN;
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kN;
  if (i >= n) return;
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * kAdvSamples;
  const int count = batch - b0 < kAdvSamples ? static_cast<int>(batch - b0) : kAdvSamples;
  const int64_t plane = batch * n;
  V f;
  if (minus_f != nullptr) f = V::load(minus_f + i);
  V x[kAdvSamples][4];
#pragma unroll
  for (int j = 0; j < kAdvSamples; ++j) {
    if (j < count) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        x[j][q] = V::load(fields + q * plane + (b0 + j) * n + i);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kAdvSamples; ++j) {
    if (j < count) {
      V a;
#pragma unroll
      for (int e = 0; e < kN; ++e) {
        const T uwx = mul_rn(x[j][0].v[e], x[j][2].v[e]);
        const T t = minus_f != nullptr ? add_rn(f.v[e], uwx) : uwx;
        a.v[e] = add_rn(t, mul_rn(x[j][1].v[e], x[j][3].v[e]));
      }
      a.store(advection + (b0 + j) * n + i);
    }
  }
}

// w_hat[b, p] = coef[4, p] w_hat[b, p] + minus_dt_gain[p] advection_hat[b, p].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    update_kernel(typename Complex<T>::type* __restrict__ w_hat,
                  const typename Complex<T>::type* __restrict__ advection_hat,
                  const typename Complex<T>::type* __restrict__ coef,
                  const typename Complex<T>::type* __restrict__ minus_dt_gain, int64_t s,
                  int64_t batch) {
  using C = typename Complex<T>::type;
  const int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (p >= s) return;
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * kSamples;
  const int n = batch - b0 < kSamples ? static_cast<int>(batch - b0) : kSamples;
  const C keep = __ldg(coef + 4 * s + p);
  const C gain = __ldg(minus_dt_gain + p);
  C w[kSamples], a[kSamples];
#pragma unroll
  for (int j = 0; j < kSamples; ++j) {
    if (j < n) {
      w[j] = w_hat[(b0 + j) * s + p];
      a[j] = advection_hat[(b0 + j) * s + p];
    }
  }
#pragma unroll
  for (int j = 0; j < kSamples; ++j) {
    if (j < n) {
      // LibTorch: addcmul(keep w_hat, advection_hat, minus_dt_gain), a + (1 b) c.
      const C kw = cmul(keep, w[j]);
      const C g = cmul(a[j], gain);
      C r;
      r.x = add_rn(kw.x, g.x);
      r.y = add_rn(kw.y, g.y);
      w_hat[(b0 + j) * s + p] = r;
    }
  }
}

unsigned blocks(int64_t n, int64_t per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

// The last launch's outcome, named `what`.
NsStatus launched(const char* what) { return {static_cast<int>(cudaGetLastError()), what}; }

// The transforms by precision: complex-to-real and real-to-complex.
cufftResult exec_c2r(cufftHandle p, float2* in, float* out) {
  return cufftExecC2R(p, reinterpret_cast<cufftComplex*>(in), out);
}
cufftResult exec_c2r(cufftHandle p, double2* in, double* out) {
  return cufftExecZ2D(p, reinterpret_cast<cufftDoubleComplex*>(in), out);
}
cufftResult exec_r2c(cufftHandle p, float* in, float2* out) {
  return cufftExecR2C(p, in, reinterpret_cast<cufftComplex*>(out));
}
cufftResult exec_r2c(cufftHandle p, double* in, double2* out) {
  return cufftExecD2Z(p, in, reinterpret_cast<cufftDoubleComplex*>(out));
}

// plan's stream set to `stream`, then exec(plan); the failing call named.
template <typename Exec>
NsStatus transform(cufftHandle plan, cudaStream_t stream, Exec exec, const char* set_name,
                   const char* exec_name) {
  if (const cufftResult e = cufftSetStream(plan, stream); e != CUFFT_SUCCESS) {
    return {static_cast<int>(e), set_name};
  }
  return {static_cast<int>(exec(plan)), exec_name};
}

template <typename T>
NsStatus step(const NsFftPlans& plans, const NsStepArgs& a, cudaStream_t stream) {
  using C = typename Complex<T>::type;
  constexpr bool f64 = sizeof(T) == 8;
  const int64_t r = a.r, batch = a.batch, s = r * (r / 2 + 1), n = r * r;
  const unsigned by = blocks(batch, kSamples);
  auto* const spectra = static_cast<C*>(a.spectra);
  auto* const fields = static_cast<T*>(a.fields);
  auto* const advection = static_cast<T*>(a.advection);
  auto* const advection_hat = static_cast<C*>(a.advection_hat);
  spectra_kernel<T><<<dim3(blocks(s, kThreads), by), kThreads, 0, stream>>>(
      static_cast<const C*>(a.w_hat), static_cast<const C*>(a.coef), spectra, s, batch);
  NsStatus st = launched("the spectra kernel's launch");
  if (st.ok()) {
    st = transform(
        plans.c2r, stream, [&](cufftHandle p) { return exec_c2r(p, spectra, fields); },
        "cufftSetStream (C2R)", f64 ? "cufftExecZ2D" : "cufftExecC2R");
  }
  if (!st.ok()) return st;
  constexpr int kN = Vec<T>::kN;
  advection_kernel<T>
      <<<dim3(blocks(n / kN, kThreads), blocks(batch, kAdvSamples)), kThreads, 0, stream>>>(
          fields, static_cast<const T*>(a.minus_f), advection, n, batch);
  st = launched("the advection kernel's launch");
  if (st.ok()) {
    st = transform(
        plans.r2c, stream, [&](cufftHandle p) { return exec_r2c(p, advection, advection_hat); },
        "cufftSetStream (R2C)", f64 ? "cufftExecD2Z" : "cufftExecR2C");
  }
  if (!st.ok()) return st;
  update_kernel<T><<<dim3(blocks(s, kThreads), by), kThreads, 0, stream>>>(
      static_cast<C*>(a.w_hat), advection_hat, static_cast<const C*>(a.coef),
      static_cast<const C*>(a.minus_dt_gain), s, batch);
  return launched("the update kernel's launch");
}

}  // namespace

NsStatus ns_fft_plans_create(NsFftPlans* plans, int64_t batch, int64_t r, bool f64) {
  ns_fft_plans_destroy(plans);
  // The basic layout (null embeds, as LibTorch's plans of contiguous tensors):
  // [R, R/2+1] complex and [R, R] real, one after another.
  long long dims[2] = {r, r};
  const long long s = r * (r / 2 + 1), n = r * r;
  size_t c2r_bytes = 0, r2c_bytes = 0;
  NsStatus status;
  const auto fail = [&](cufftResult e, const char* call) {
    if (e != CUFFT_SUCCESS && status.ok()) status = {static_cast<int>(e), call};
    return e != CUFFT_SUCCESS;
  };
  if (const cudaError_t e = cudaGetDevice(&plans->device); e != cudaSuccess) {
    return {static_cast<int>(e), "cudaGetDevice"};
  }
  cufftHandle h = 0;
  if (fail(cufftCreate(&h), "cufftCreate (C2R)")) return status;
  plans->c2r = h;
  if (fail(cufftSetAutoAllocation(plans->c2r, 0), "cufftSetAutoAllocation (C2R)") ||
      fail(cufftMakePlanMany64(plans->c2r, 2, dims, nullptr, 1, s, nullptr, 1, n,
                               f64 ? CUFFT_Z2D : CUFFT_C2R, 4 * batch, &c2r_bytes),
           "cufftMakePlanMany64 (C2R)") ||
      fail(cufftCreate(&h), "cufftCreate (R2C)")) {
    ns_fft_plans_destroy(plans);
    return status;
  }
  plans->r2c = h;
  if (fail(cufftSetAutoAllocation(plans->r2c, 0), "cufftSetAutoAllocation (R2C)") ||
      fail(cufftMakePlanMany64(plans->r2c, 2, dims, nullptr, 1, n, nullptr, 1, s,
                               f64 ? CUFFT_D2Z : CUFFT_R2C, batch, &r2c_bytes),
           "cufftMakePlanMany64 (R2C)")) {
    ns_fft_plans_destroy(plans);
    return status;
  }
  plans->work_bytes = std::max(c2r_bytes, r2c_bytes);
  return status;
}

NsStatus ns_fft_plans_set_work_area(const NsFftPlans& plans, void* work) {
  if (const cufftResult e = cufftSetWorkArea(plans.c2r, work); e != CUFFT_SUCCESS) {
    return {static_cast<int>(e), "cufftSetWorkArea (C2R)"};
  }
  if (const cufftResult e = cufftSetWorkArea(plans.r2c, work); e != CUFFT_SUCCESS) {
    return {static_cast<int>(e), "cufftSetWorkArea (R2C)"};
  }
  return {};
}

void ns_fft_plans_destroy(NsFftPlans* plans) {
  if (plans->c2r != -1 || plans->r2c != -1) {
    int current = -1;
    const bool switched = plans->device >= 0 && cudaGetDevice(&current) == cudaSuccess &&
                          current != plans->device && cudaSetDevice(plans->device) == cudaSuccess;
    if (plans->c2r != -1) cufftDestroy(plans->c2r);
    if (plans->r2c != -1) cufftDestroy(plans->r2c);
    if (switched) cudaSetDevice(current);
  }
  plans->c2r = plans->r2c = -1;
  plans->work_bytes = 0;
}

NsStatus ns_step(const NsFftPlans& plans, const NsStepArgs& args, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  return args.f64 ? step<double>(plans, args, s) : step<float>(plans, args, s);
}

}  // namespace fno::data::cuda
