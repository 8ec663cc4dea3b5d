// Internal: the pieces of SpectralConv's transform, shared by the whole-grid
// forward (SpectralConvImpl::forward) and the tiled step (fno/tiled.h), which
// runs the same transform one tile of the first spatial dim at a time.
//
// The transform of a [B, C, S0, ..., S_last] grid, rfftn(norm="forward") kept
// to the low modes, is separable:
//   last dim      real DFT, first k_last modes (GEMMs against the kept modes, or cuFFT)
//   middle dims   complex FFT, the kept corners gathered (3D: S1)
//   first dim     complex FFT, the kept corners gathered; over tiles, a sum of
//                 partial DFTs (a [k0, rows] matrix per tile), whose adjoint
//                 writes each tile's rows
// and the inverse runs the same steps backwards. Every step is differentiable
// LibTorch code, so autograd gives the adjoints.
#pragma once

#include <fno/band.h>
#include <fno/layers.h>

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace fno::detail {

// The real DFT of the last dim restricted to its first k modes, as GEMMs, with
// norm="forward". With an FNO's few modes this reads the grid once and writes
// only the kept modes, where rfft writes the whole spectrum (and irfft reads a
// zero-filled one); in backward the same holds for the transposed GEMMs.
//   analysis  [n, 2k]: x @ A = rfft(x, norm="forward")[:k], re/im interleaved
//   synthesis [2k, n]: X @ S = irfft(X zero-filled to n//2+1 modes, n, norm="forward")
// In bf16/fp16 the analysis matrix is scaled by 1/sqrt(n), not 1/n: fp16
// would hold entries of 1/n only as subnormals on long grids, and an
// unnormalized sum would overflow it; its output is cast to fp32 and scaled
// by `analysis_scale` = 1/sqrt(n).
struct RealDft {
  torch::Tensor analysis, synthesis;
  double analysis_scale = 1.0;
  torch::Tensor analysis_t, synthesis_t;  // the transposes, contiguous: [2k, n], [n, 2k]
};
/// Cached per (n, k, device, dtype).
RealDft real_dft(int64_t n, int64_t k, const torch::TensorOptions& options);

/// GEMMs for up to this many kept modes of the last dim; cuFFT beyond.
constexpr int64_t kMaxDftGemmModes = 48;

/// What a SpectralConv keeps of a grid, and how it transforms it.
struct SpectralModes {
  std::vector<int64_t> spatial;  // the whole grid [S0, ..., S_last]
  std::vector<int64_t> kept;     // modes kept per dim (the last: of the half spectrum)
  torch::Tensor weight;          // [Cin, Cout, kept...] complex: the parameter's slice
  bool gemm = false;             // the last dim's DFT as GEMMs (else cuFFT)
  bool first_gemm = false;       // the first dim's (2D, 3D) as complex GEMMs (else cuFFT)
  bool middle_gemm = false;      // 3D: the middle dim's as complex GEMMs (else cuFFT)
  bool reduced = false;          // bf16/fp16 activations: modes in complex64
  RealDft dft;                   // the last dim's matrices (gemm)
  int64_t n_dim() const { return static_cast<int64_t>(spatial.size()); }
};

/// The modes `conv` keeps on a grid of size `spatial` for activations of
/// `options` (dtype, device). When the grid holds fewer modes than the
/// weights, a centred sub-slice of the weights, as neuraloperator slices it.
SpectralModes spectral_modes(const SpectralConvImpl& conv, torch::IntArrayRef spatial,
                             const torch::TensorOptions& options);

// x: [..., S_last] (activations) -> [..., k_last] complex64
torch::Tensor last_dim_forward(const SpectralModes& m, const torch::Tensor& x);
// The last dim's spectrum made Hermitian where a real inverse reads it: the
// imaginary parts of the zero mode and (n even, all n/2 + 1 modes kept) the
// Nyquist mode dropped, as numpy's irfft defines them. cuFFT's c2r on input
// that is not Hermitian is undefined (on an H100 it differs from float64 by
// 1e-2 at n = 8192); the real-DFT GEMM drops them by construction (its
// synthesis rows hold sin 0 and sin pi r there).
// modes: [..., k] complex -> [..., k] complex
torch::Tensor hermitian_edges(const torch::Tensor& modes, int64_t n);
// modes: [..., k_last] complex64 -> [..., S_last] in `dtype`; every path
// reads the spectrum as hermitian_edges leaves it.
torch::Tensor last_dim_inverse(const SpectralModes& m, const torch::Tensor& modes,
                               c10::ScalarType dtype);
// The non-last dims first_dim .. n_dim-2, innermost first: FFT, kept corners
// (the first dim, with first_gemm, and a 3D conv's middle dim, with
// middle_gemm: the kept-mode DFT as one complex GEMM).
// x_ft: [B, C, *S'] complex -> [B, C, *K'] on those dims
torch::Tensor corner_dims_forward(const SpectralModes& m, torch::Tensor x_ft, int64_t first_dim);
// The inverse: corners scattered between zeros, inverse FFT, outermost first
// (with first_gemm / middle_gemm: a complex GEMM).
torch::Tensor corner_dims_inverse(const SpectralModes& m, torch::Tensor out, int64_t first_dim);
// Channel mixing per mode, and the bias at the zero mode (the inverse
// transforms add it at every grid point).
// x_ft: [B, Cin, *K] -> [B, Cout, *K]
torch::Tensor mix_modes(const SpectralConvImpl& conv, const SpectralModes& m,
                        const torch::Tensor& x_ft, bool add_bias);

// Tiles of the first spatial dim (rows r0 .. r0 + n of S0):
// x_hat: [B, C, n, *K'] complex (the other dims already transformed) ->
// this tile's share of the first dim's kept modes, [B, C, k0, *K']: the
// tiles' shares add up to the whole grid's.
torch::Tensor first_dim_analysis(const SpectralModes& m, const torch::Tensor& x_hat, int64_t r0);
// y: [B, C, k0, *K'] complex -> rows r0 .. r0 + n of the inverse along the
// first dim, [B, C, n, *K']
torch::Tensor first_dim_synthesis(const SpectralModes& m, const torch::Tensor& y, int64_t r0,
                                  int64_t n);

/// One tile's share of SpectralConv's kept spectrum (before mixing).
/// a: [B, C, n, *S'] rows r0.. -> [B, C, *K] complex64
torch::Tensor analysis_tile(const SpectralModes& m, const torch::Tensor& a, int64_t r0);
/// Rows r0 .. r0 + n of the inverse transform of mixed modes y.
/// y: [B, C, *K] complex64 -> [B, C, n, *S'] in `dtype`
torch::Tensor synthesis_tile(const SpectralModes& m, const torch::Tensor& y, int64_t r0, int64_t n,
                             c10::ScalarType dtype);

/// The adjoints of the two, as autograd would backpropagate through them,
/// without their forward. They take the shapes the maps give: `n` rows of the
/// grid for the analysis' input, `kept` for the synthesis' modes.
/// dx: [B, C, *K] complex64 -> [B, C, n, *S'] in `dtype`
torch::Tensor analysis_tile_adjoint(const SpectralModes& m, const torch::Tensor& dx, int64_t r0,
                                    int64_t n, c10::ScalarType dtype);
/// g += analysis_tile_adjoint(m, dx, r0, g.size(2), g's dtype), in place: with
/// the last dim's GEMMs, the transpose adds into g (beta = 1) without a
/// tile-sized temporary. g: [B, C, n, *S'] contiguous
void analysis_tile_adjoint_add(const SpectralModes& m, const torch::Tensor& dx, int64_t r0,
                               torch::Tensor& g);
/// ds: [B, C, n, *S'] in the activations' dtype -> [B, C, *K] complex64
torch::Tensor synthesis_tile_adjoint(const SpectralModes& m, const torch::Tensor& ds, int64_t r0);

/// A SpectralConv's forward on a band of rows (fno/band.h's BandGuard): the
/// band's share of the kept spectrum of the whole grid (analysis_tile at the
/// band's global first row), summed over the ranks (band_sum, differentiable),
/// the channels mixed as on the whole grid (the bias in the zero mode when
/// `add_bias`), and the band's own rows of the inverse (synthesis_tile).
// x: [B, Cin, n, *S'] -> [B, Cout, n, *S']
torch::Tensor band_forward(const SpectralConvImpl& conv, const Band& band, const torch::Tensor& x,
                           bool add_bias);

}  // namespace fno::detail
