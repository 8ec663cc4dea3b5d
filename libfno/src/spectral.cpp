#include "spectral.h"

#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>

#include <fno/overrides.h>
#include "dft_expand_fused.h"

namespace fno::detail {

RealDft real_dft(int64_t n, int64_t k, const torch::TensorOptions& options) {
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, std::string, c10::ScalarType>, RealDft> cache;
  const auto key =
      std::make_tuple(n, k, options.device().str(), c10::typeMetaToScalarType(options.dtype()));
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const auto t = torch::arange(n, torch::TensorOptions().dtype(torch::kLong));
  const auto j = torch::arange(k, torch::TensorOptions().dtype(torch::kLong));
  // (j t mod n) exactly in integers, then the angle: accurate for large n.
  const auto theta = (torch::outer(j, t) % n).to(f64) * (2.0 * M_PI / static_cast<double>(n));
  const auto c = torch::cos(theta), s = torch::sin(theta);  // [k, n]
  const bool reduced = options.dtype() == torch::kBFloat16 || options.dtype() == torch::kHalf;
  const double analysis_scale = reduced ? 1.0 / std::sqrt(static_cast<double>(n)) : 1.0;
  auto analysis = torch::stack({c, -s}, 1).reshape({2 * k, n}).t() /
                  (reduced ? std::sqrt(static_cast<double>(n)) : static_cast<double>(n));
  // irfft weights: 1 for the zero mode and (n even) the Nyquist mode, 2 for the others.
  auto weight = torch::full({k}, 2.0, f64);
  weight[0] = 1.0;
  if (n % 2 == 0 && k == n / 2 + 1) weight[k - 1] = 1.0;
  auto synthesis = (torch::stack({c, -s}, 1) * weight.view({k, 1, 1})).reshape({2 * k, n});
  RealDft out;
  out.analysis = analysis.contiguous().to(options);
  out.synthesis = synthesis.contiguous().to(options);
  out.analysis_scale = analysis_scale;
  out.analysis_t = out.analysis.t().contiguous();
  out.synthesis_t = out.synthesis.t().contiguous();
  cache.emplace(key, out);
  return out;
}

namespace {

// FNO_DFT_FIRST_DIM=0 (an experiment override, read once): the first dim's
// kept modes come from cuFFT and a gather again, to measure one against the
// other in one process.
bool first_dim_gemm_enabled() {
  static const bool on = fno::override_on("FNO_DFT_FIRST_DIM");
  return on;
}

// FNO_DFT_MIDDLE_DIM=0 (an experiment override, read once): a 3D conv's
// middle dim takes its kept modes from cuFFT and a gather (and its inverse a
// zero-filled scatter) again, instead of one complex GEMM each way.
bool middle_dim_gemm_enabled() {
  static const bool on = fno::override_on("FNO_DFT_MIDDLE_DIM");
  return on;
}

}  // namespace

SpectralModes spectral_modes(const SpectralConvImpl& conv, torch::IntArrayRef spatial,
                             const torch::TensorOptions& options) {
  SpectralModes m;
  m.spatial = spatial.vec();
  const auto n_dim = m.n_dim();
  const int64_t n_half = m.spatial.back() / 2 + 1;
  // Modes kept per dim, and the matching weight slice. For all dims but the
  // last: frequencies -k//2 .. k-k//2-1 with neuraloperator's centred weight
  // sub-slice weight[s//2 : m - ceil(s/2)], s = m - k, when the grid holds fewer
  // than m modes. For the last: frequencies 0 .. k-1.
  auto w = conv.weight->tensor;
  m.kept.resize(n_dim);
  for (int64_t i = 0; i < n_dim; ++i) {
    const int64_t dim = i + 2;
    const int64_t n = i == n_dim - 1 ? n_half : m.spatial[i];
    const int64_t modes = w.size(dim);
    m.kept[i] = std::min(n, modes);
    w = w.narrow(dim, i == n_dim - 1 ? 0 : (modes - m.kept[i]) / 2, m.kept[i]);
  }
  m.weight = w;
  const auto dtype = c10::typeMetaToScalarType(options.dtype());
  m.reduced = dtype == torch::kBFloat16 || dtype == torch::kHalf;
  m.gemm = m.kept.back() <= kMaxDftGemmModes && c10::isFloatingType(dtype);
  if (m.gemm) m.dft = real_dft(m.spatial.back(), m.kept.back(), options);
  m.first_gemm = n_dim >= 2 && m.kept[0] <= kMaxDftGemmModes && first_dim_gemm_enabled();
  m.middle_gemm = n_dim == 3 && m.kept[1] <= kMaxDftGemmModes && middle_dim_gemm_enabled();
  return m;
}

namespace {

// A non-last dim's kept-mode DFT matrices (the first dim's, and a 3D conv's
// middle dim's) for n grid points and k kept modes (frequency f_i = i - k/2 at
// index i, as the corners are gathered):
//   analysis  [k, n]: exp(-2 pi i f_i r / n) / n    (fft, norm="forward")
//   synthesis [n, k]: exp(+2 pi i f_i r / n)        (ifft, norm="forward")
// Cached per (n, k, device, complex type).
struct KeptModeDft {
  torch::Tensor analysis, synthesis;
  torch::Tensor analysis_adjoint, synthesis_adjoint;  // conjugate transposes: [n, k], [k, n]
};

KeptModeDft kept_mode_dft(int64_t n, int64_t k, const torch::Device& device,
                          c10::ScalarType dtype) {
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, std::string, c10::ScalarType>, KeptModeDft> cache;
  const auto key = std::make_tuple(n, k, device.str(), dtype);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const auto i64 = torch::TensorOptions().dtype(torch::kLong);
  const auto f = torch::arange(k, i64) - k / 2;
  const auto r = torch::arange(n, i64);
  // (f r mod n) exactly in integers, then the angle: accurate for large n.
  const auto theta = torch::remainder(torch::outer(f, r), n).to(torch::kDouble) *
                     (2.0 * M_PI / static_cast<double>(n));  // [k, n]
  const auto c = torch::cos(theta), s = torch::sin(theta);
  const auto analysis = torch::complex(c, -s) / static_cast<double>(n);
  const auto synthesis = torch::complex(c, s).t();
  const auto put = [&](const torch::Tensor& t) { return t.to(dtype).contiguous().to(device); };
  KeptModeDft out{put(analysis), put(synthesis), put(analysis.conj().t()),
                  put(synthesis.conj().t())};
  cache.emplace(key, out);
  return out;
}

// mat [k, n] times each matrix of x [..., n, K] -> [..., k, K]: one batched
// GEMM with mat broadcast (batch stride 0), which copies neither operand in
// forward or backward (torch::matmul folds x, a copy, when it requires grad).
torch::Tensor rows_times(const torch::Tensor& mat, const torch::Tensor& x) {
  auto shape = x.sizes().vec();
  const auto x3 = x.reshape({-1, x.size(-2), x.size(-1)});
  const auto y = torch::bmm(mat.unsqueeze(0).expand({x3.size(0), -1, -1}), x3);
  shape[shape.size() - 2] = mat.size(0);
  return y.view(shape);
}

// x @ mat for one of the last dim's DFT matrices: the expanding product (a
// grid-sized output from the kept modes) by cuda/dft_expand.h where it
// applies, else cuBLAS.
torch::Tensor dft_gemm(const torch::Tensor& x, const torch::Tensor& mat) {
  return dft_expand_usable(x, mat) ? dft_expand(x, mat) : torch::matmul(x, mat);
}

// y = x @ mat with a constant mat, whose backward is g @ mat_t (mat_t = mat^T,
// contiguous), so that both the synthesis' forward and the analysis' adjoint
// take dft_gemm. mat_t is kept in saved_data, not
// saved_variables: the offload hooks move saved activations, not constants.
class DftGemmFn : public torch::autograd::Function<DftGemmFn> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& mat, const torch::Tensor& mat_t) {
    ctx->saved_data["mat_t"] = mat_t;
    return dft_gemm(x, mat);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto mat_t = ctx->saved_data["mat_t"].toTensor();
    return {grads[0].defined() ? dft_gemm(grads[0], mat_t) : torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

// x @ mat, differentiable in x: DftGemmFn where the kernel serves the product
// or its backward, else torch::matmul's own autograd (as without the kernel).
torch::Tensor last_dim_gemm(const torch::Tensor& x, const torch::Tensor& mat,
                            const torch::Tensor& mat_t) {
  if (dft_expand_usable(x, mat) || (x.scalar_type() == torch::kFloat &&
                                    x.device() == mat.device() && dft_expand_usable(mat_t))) {
    return DftGemmFn::apply(x, mat, mat_t);
  }
  return torch::matmul(x, mat);
}

// t's `dim` holds the `kept` lowest modes of a length-`len` transform as
// corner_dims_forward leaves them: the kept / 2 negative frequencies, then
// the others. Returns the whole spectrum in FFT order (the others, zeros, the
// negative ones) inverse-transformed along dim with `norm`.
torch::Tensor ifft_of_kept(const torch::Tensor& t, int64_t dim, int64_t kept, int64_t len,
                           const char* norm) {
  const int64_t neg = kept / 2;
  const int64_t pos = kept - neg;
  std::vector<torch::Tensor> parts{t.narrow(dim, neg, pos)};
  if (kept < len) {
    auto shape = t.sizes().vec();
    shape[dim] = len - kept;
    parts.push_back(torch::zeros(shape, t.options()));
  }
  parts.push_back(t.narrow(dim, 0, neg));
  return torch::fft::ifft(torch::cat(parts, dim), c10::nullopt, dim, norm);
}

}  // namespace

torch::Tensor last_dim_forward(const SpectralModes& m, const torch::Tensor& x) {
  // In bf16/fp16 the grid-sized GEMMs run in that type (tensor cores, fp32
  // accumulation) and the kept modes in complex64: the spectrum is a small
  // fraction of the grid, and cuFFT has no bf16 (and its fp16 takes powers of
  // two only).
  if (m.gemm) {
    // x: [..., S] -> [..., 2k] -> [..., k] complex
    auto coeffs = last_dim_gemm(x, m.dft.analysis, m.dft.analysis_t);
    if (m.reduced) coeffs = coeffs.to(torch::kFloat).mul_(m.dft.analysis_scale);
    return torch::view_as_complex(coeffs.unflatten(-1, {m.kept.back(), 2}));
  }
  return torch::fft::rfft(m.reduced ? x.to(torch::kFloat) : x, c10::nullopt, -1, "forward")
      .narrow(-1, 0, m.kept.back());
}

torch::Tensor hermitian_edges(const torch::Tensor& modes, int64_t n) {
  const int64_t k = modes.size(-1);
  const bool nyquist = n % 2 == 0 && k == n / 2 + 1;
  // [k, 2]: ones, but the imaginary parts of the zero and Nyquist modes.
  auto keep = torch::ones({k, 2}, modes.options().dtype(c10::toRealValueType(modes.scalar_type())));
  keep.select(1, 1).narrow(0, 0, 1).zero_();
  if (nyquist) keep.select(1, 1).narrow(0, k - 1, 1).zero_();
  return torch::view_as_complex(torch::view_as_real(modes) * keep);
}

torch::Tensor last_dim_inverse(const SpectralModes& m, const torch::Tensor& modes,
                               c10::ScalarType dtype) {
  if (m.gemm) {
    // [..., k] complex -> [..., 2k] -> [..., S]
    auto re = torch::view_as_real(modes).flatten(-2);
    return last_dim_gemm(m.reduced ? re.to(dtype) : re, m.dft.synthesis, m.dft.synthesis_t);
  }
  // irfft zero-pads the last dim from k_last to S//2 + 1 modes itself.
  auto y =
      torch::fft::irfft(hermitian_edges(modes, m.spatial.back()), m.spatial.back(), -1, "forward");
  return m.reduced ? y.to(dtype) : y;
}

torch::Tensor corner_dims_forward(const SpectralModes& m, torch::Tensor x_ft, int64_t first_dim) {
  for (int64_t i = m.n_dim() - 2; i >= first_dim; --i) {
    // The first dim's kept modes as one complex GEMM: no full-length FFT, no
    // gather (and, in backward, no zero-filled scatter).
    if (i == 0 && m.first_gemm) return first_dim_analysis(m, x_ft, 0);
    const int64_t dim = i + 2;
    const int64_t n = m.spatial[i];
    if (i > 0 && m.middle_gemm) {
      // 3D: [k1, S1] x [B, C, S0, S1, k2] -> [B, C, S0, k1, k2]
      x_ft =
          rows_times(kept_mode_dft(n, m.kept[i], x_ft.device(), x_ft.scalar_type()).analysis, x_ft);
      continue;
    }
    const int64_t neg = m.kept[i] / 2;
    const int64_t pos = m.kept[i] - neg;
    x_ft = torch::fft::fft(x_ft, c10::nullopt, dim, "forward");
    x_ft = torch::cat({x_ft.narrow(dim, n - neg, neg), x_ft.narrow(dim, 0, pos)}, dim);
  }
  return x_ft;
}

torch::Tensor corner_dims_inverse(const SpectralModes& m, torch::Tensor out, int64_t first_dim) {
  for (int64_t i = first_dim; i < m.n_dim() - 1; ++i) {
    if (i == 0 && m.first_gemm) {
      out = first_dim_synthesis(m, out, 0, m.spatial[0]);
      continue;
    }
    const int64_t dim = i + 2;
    const int64_t n = m.spatial[i];
    if (i > 0 && m.middle_gemm) {
      // 3D: [S1, k1] x [B, C, S0, k1, k2] -> [B, C, S0, S1, k2]
      out = rows_times(kept_mode_dft(n, m.kept[i], out.device(), out.scalar_type()).synthesis, out);
      continue;
    }
    out = ifft_of_kept(out, dim, m.kept[i], n, "forward");
  }
  return out;
}

torch::Tensor mix_modes(const SpectralConvImpl& conv, const SpectralModes& m,
                        const torch::Tensor& x_ft, bool add_bias) {
  // [B, Cin, K...] x [Cin, Cout, K...] -> [B, Cout, K...]
  static const char* kEquations[] = {"bix,iox->box", "bixy,ioxy->boxy", "bixyz,ioxyz->boxyz"};
  auto out = torch::einsum(kEquations[m.n_dim() - 1], {x_ft, m.weight});
  if (add_bias && conv.bias.defined()) {
    // The bias, added to the zero-frequency mode, comes out at every grid point
    // (the inverse transforms are unnormalized). That mode sits at index kept/2
    // of each non-last dim (after the negative frequencies) and 0 of the last.
    out = out.clone();
    auto dc = out;
    for (int64_t i = 0; i < m.n_dim() - 1; ++i) dc = dc.narrow(i + 2, m.kept[i] / 2, 1);
    dc = dc.narrow(m.n_dim() + 1, 0, 1);
    dc.add_(conv.bias.to(out.scalar_type()));
  }
  return out;
}

torch::Tensor first_dim_analysis(const SpectralModes& m, const torch::Tensor& x_hat, int64_t r0) {
  const int64_t n = x_hat.size(2);
  const auto f = kept_mode_dft(m.spatial[0], m.kept[0], x_hat.device(), x_hat.scalar_type())
                     .analysis.narrow(1, r0, n);
  // [k0, n] x [B, C, n, R] -> [B, C, k0, R]
  auto shape = x_hat.sizes().vec();
  auto out = torch::matmul(f, x_hat.flatten(3));
  shape[2] = m.kept[0];
  return out.view(shape);
}

torch::Tensor first_dim_synthesis(const SpectralModes& m, const torch::Tensor& y, int64_t r0,
                                  int64_t n) {
  const auto e = kept_mode_dft(m.spatial[0], m.kept[0], y.device(), y.scalar_type())
                     .synthesis.narrow(0, r0, n);
  // [n, k0] x [B, C, k0, R] -> [B, C, n, R]
  auto shape = y.sizes().vec();
  auto out = torch::matmul(e, y.flatten(3));
  shape[2] = n;
  return out.view(shape);
}

namespace {

// The vector-Jacobian product of a linear map f at `like`'s shape and type:
// autograd's adjoint, for the (rare) maps written here without one.
torch::Tensor vjp(const std::function<torch::Tensor(const torch::Tensor&)>& f,
                  const torch::Tensor& like, const torch::Tensor& grad) {
  torch::AutoGradMode grad_mode(true);
  const auto at = torch::zeros_like(like).requires_grad_(true);
  return torch::autograd::grad({f(at)}, {at}, {grad})[0];
}

// The adjoint of the first and middle dims' transforms: dx: [B, C, *K]
// complex -> [B, C, n, *S'', k_last] complex (S'': the middle dims, whole).
torch::Tensor adjoint_to_last_dim(const SpectralModes& m, const torch::Tensor& dx, int64_t r0,
                                  int64_t n) {
  // The first dim: [n, k0] x [B, C, k0, R] -> [B, C, n, R]
  const auto f = kept_mode_dft(m.spatial[0], m.kept[0], dx.device(), dx.scalar_type())
                     .analysis_adjoint.narrow(0, r0, n);
  auto shape = dx.sizes().vec();
  shape[2] = n;
  auto g = torch::matmul(f, dx.flatten(3)).view(shape);
  // The middle dims (3D), outermost first: corners scattered between zeros,
  // then fft(norm="forward")'s adjoint, ifft(norm="backward").
  for (int64_t i = 1; i < m.n_dim() - 1; ++i) {
    const int64_t dim = i + 2;
    const int64_t len = m.spatial[i];
    g = ifft_of_kept(g, dim, m.kept[i], len, "backward");
  }
  return g;
}

// The last dim's GEMM input: g: [..., k] complex -> [..., 2k] in `dtype`.
torch::Tensor last_dim_adjoint_input(const SpectralModes& m, const torch::Tensor& g,
                                     c10::ScalarType dtype) {
  auto re = torch::view_as_real(g.contiguous()).flatten(-2);
  if (m.reduced) re = (re * m.dft.analysis_scale).to(dtype);
  return re;
}

}  // namespace

torch::Tensor analysis_tile_adjoint(const SpectralModes& m, const torch::Tensor& dx, int64_t r0,
                                    int64_t n, c10::ScalarType dtype) {
  const auto g = adjoint_to_last_dim(m, dx, r0, n);
  // The last dim: the GEMM's transpose, or autograd's for rfft.
  if (!m.gemm) {
    auto out_shape = g.sizes().vec();
    out_shape.back() = m.spatial.back();
    const auto like = torch::empty(out_shape, g.options().dtype(dtype));
    return vjp([&](const torch::Tensor& t) { return last_dim_forward(m, t); }, like, g);
  }
  return dft_gemm(last_dim_adjoint_input(m, g, dtype), m.dft.analysis_t);
}

void analysis_tile_adjoint_add(const SpectralModes& m, const torch::Tensor& dx, int64_t r0,
                               torch::Tensor& g) {
  if (!m.gemm || !g.is_contiguous()) {
    g.add_(analysis_tile_adjoint(m, dx, r0, g.size(2), g.scalar_type()));
    return;
  }
  const auto re = last_dim_adjoint_input(m, adjoint_to_last_dim(m, dx, r0, g.size(2)),
                                         g.scalar_type());  // [..., 2k]
  const int64_t len = m.spatial.back();
  g.view({-1, len}).addmm_(re.reshape({-1, re.size(-1)}), m.dft.analysis.t());
}

torch::Tensor synthesis_tile_adjoint(const SpectralModes& m, const torch::Tensor& ds, int64_t r0) {
  const int64_t n = ds.size(2);
  // The last dim: the GEMM's transpose, or autograd's for irfft.
  torch::Tensor g;
  if (m.gemm) {
    auto re = torch::matmul(ds, m.dft.synthesis.t());  // [..., 2k]
    if (m.reduced) re = re.to(torch::kFloat);
    g = torch::view_as_complex(re.unflatten(-1, {m.kept.back(), 2}).contiguous());
  } else {
    auto shape = ds.sizes().vec();
    shape.back() = m.kept.back();
    const auto like = torch::empty(shape, ds.options().dtype(torch::kComplexFloat));
    g = vjp([&](const torch::Tensor& t) { return last_dim_inverse(m, t, ds.scalar_type()); }, like,
            ds);
  }
  // The middle dims (3D), innermost first: ifft(norm="forward")'s adjoint,
  // fft(norm="backward"), then the kept corners gathered.
  for (int64_t i = m.n_dim() - 2; i >= 1; --i) {
    const int64_t dim = i + 2;
    const int64_t len = m.spatial[i];
    const int64_t neg = m.kept[i] / 2;
    const int64_t pos = m.kept[i] - neg;
    g = torch::fft::fft(g, c10::nullopt, dim, "backward");
    g = torch::cat({g.narrow(dim, len - neg, neg), g.narrow(dim, 0, pos)}, dim);
  }
  // The first dim: [k0, n] x [B, C, n, R] -> [B, C, k0, R]
  const auto e = kept_mode_dft(m.spatial[0], m.kept[0], g.device(), g.scalar_type())
                     .synthesis_adjoint.narrow(1, r0, n);
  auto shape = g.sizes().vec();
  shape[2] = m.kept[0];
  return torch::matmul(e, g.flatten(3)).view(shape);
}

torch::Tensor analysis_tile(const SpectralModes& m, const torch::Tensor& a, int64_t r0) {
  return first_dim_analysis(m, corner_dims_forward(m, last_dim_forward(m, a), 1), r0);
}

torch::Tensor synthesis_tile(const SpectralModes& m, const torch::Tensor& y, int64_t r0, int64_t n,
                             c10::ScalarType dtype) {
  return last_dim_inverse(m, corner_dims_inverse(m, first_dim_synthesis(m, y, r0, n), 1), dtype);
}

torch::Tensor band_forward(const SpectralConvImpl& conv, const Band& band, const torch::Tensor& x,
                           bool add_bias) {
  TORCH_CHECK(x.dim() == 4 || x.dim() == 5,
              "SpectralConv on a band of rows: needs a 2D or 3D input [B, C, n, *S'], got shape ",
              x.sizes());
  const int64_t n = x.size(2);
  TORCH_CHECK(band.row0 >= 0 && band.row0 + n <= band.grid_rows, "SpectralConv: a band of ", n,
              " rows at row ", band.row0, " does not fit a grid of ", band.grid_rows, " rows");
  auto spatial = x.sizes().slice(2).vec();
  spatial[0] = band.grid_rows;
  const auto m = spectral_modes(conv, spatial, x.options());
  // [B, Cin, n, *S'] -> [B, Cin, *K] complex: the band's share, then the whole grid's
  const auto x_ft = band_sum(band, analysis_tile(m, x, band.row0));
  // [B, Cin, *K] -> [B, Cout, *K], the bias in the zero mode
  const auto out = mix_modes(conv, m, x_ft, add_bias);
  // [B, Cout, *K] -> [B, Cout, n, *S']: the band's rows
  return synthesis_tile(m, out, band.row0, n, x.scalar_type());
}

}  // namespace fno::detail
