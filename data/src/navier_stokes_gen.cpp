// The 2D Navier-Stokes generator (see fno_data/navier_stokes_gen.h): the
// paper's initial fields and forcing, its pseudo-spectral scheme on the real
// half spectrum (float64 or float32; on CUDA the fused step of
// cuda/ns_step.cu, replayed from CUDA graphs), and
// the records streamed into HDF5 files by the machinery the other generators
// use (gen_common.h).
#include <fno_data/navier_stokes_gen.h>

#include <fno/overrides.h>
#include <fno_data/darcy.h>
#include <fno_data/fingerprint.h>

#include "gen_common.h"

#include <c10/util/Exception.h>
#include <torch/fft.h>
#include <torch/torch.h>

#ifdef FNO_DATA_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif
#ifdef FNO_DATA_CUDA_KERNELS
#include "cuda/ns_step.h"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace fno::data {
namespace {

using gen::kPi;
/// Bumped whenever the same options would give different data (2: the step
/// of fewer passes, whose float64 rounding differs from version 1's; 3: the
/// fused CUDA step, whose cuFFT plans may round differently from LibTorch's).
constexpr int kNsGeneratorVersion = 3;
constexpr int64_t kNsMaxResolution = 4096;
/// At most this many records (the datasets' chunks hold one sample each).
constexpr int64_t kMaxRecords = 100000;
/// At most this many time steps a sample (2^53: exact in a double, far inside 64 bits).
constexpr double kMaxSteps = 9007199254740992.0;

const std::vector<int64_t> kDims{1, 2};

/// The operators of the scheme on the half spectrum of an R x R grid.
struct SpectralOps {
  torch::Tensor ikx, iky;  // 2 pi i k_x, 2 pi i k_y (0 at the Nyquist modes), complex128
  torch::Tensor inv_lap;   // 1 / (4 pi^2 |k|^2), 0 at k = 0
  torch::Tensor lap;       // 4 pi^2 |k|^2
  torch::Tensor dealias;   // 1 where |k_x|, |k_y| <= (2/3) (R/2), else 0
};

SpectralOps spectral_ops(int64_t r, const torch::Device& device) {
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble).device(device);
  const double n = static_cast<double>(r);
  const auto kx = torch::fft::fftfreq(r, 1.0 / n, f64).view({-1, 1});   // along x (dim 1)
  const auto ky = torch::fft::rfftfreq(r, 1.0 / n, f64).view({1, -1});  // along y (dim 2)
  const double nyquist = n / 2.0;
  const auto no_nyquist = [&](const torch::Tensor& k) {
    return torch::where(k.abs() >= nyquist, torch::zeros_like(k), k);
  };
  SpectralOps ops;
  const auto i2pi = c10::complex<double>(0.0, 2.0 * kPi);
  ops.ikx = no_nyquist(kx).expand({r, r / 2 + 1}).to(torch::kComplexDouble) * i2pi;
  ops.iky = no_nyquist(ky).expand({r, r / 2 + 1}).to(torch::kComplexDouble) * i2pi;
  ops.lap = (4.0 * kPi * kPi) * (kx.square() + ky.square());
  ops.inv_lap = ops.lap.reciprocal();
  ops.inv_lap.index_put_({0, 0}, 0.0);
  const double cut = 2.0 / 3.0 * nyquist;
  ops.dealias = ((kx.abs() <= cut) & (ky.abs() <= cut)).to(torch::kDouble);
  return ops;
}

bool is_whole(double ratio) {
  return std::isfinite(ratio) && ratio >= 0.5 &&
         std::abs(ratio - std::round(ratio)) <= 1e-9 * std::max(1.0, std::abs(ratio));
}

std::string number_text(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

/// The whole `w0` of the initial file, checked against the options.
// -> [N, R, R] float64, CPU (N = samples)
torch::Tensor load_initial(const NavierStokesGenOptions& o) {
  FieldPairs pairs;
  try {
    pairs = load_hdf5(o.initial(), LoadOptions().x_key("w0").y_key("w0"));
  } catch (const std::exception& e) {
    TORCH_CHECK_VALUE(false, "initial: ", e.what());
  }
  const auto& w = pairs.x;  // [N, 1, R1, R2]
  TORCH_CHECK_VALUE(w.dim() == 4 && w.size(2) == o.resolution() && w.size(3) == o.resolution() &&
                        w.size(0) >= o.samples(),
                    "initial: '", o.initial(), "' holds w0 of shape ", w.sizes().slice(2), " for ",
                    w.size(0), " samples; expected (", o.samples(), ", ", o.resolution(), ", ",
                    o.resolution(), ") or more samples, for --samples ", o.samples(),
                    " --resolution ", o.resolution());
  return w.narrow(0, 0, o.samples()).squeeze(1).to(torch::kDouble);
}

}  // namespace

torch::Tensor ns_initial_vorticity(uint64_t seed, int64_t index, int64_t resolution, double alpha,
                                   double tau) {
  TORCH_CHECK(resolution >= 2, "ns_initial_vorticity: resolution must be >= 2, got ", resolution);
  TORCH_CHECK(index >= 0, "ns_initial_vorticity: index must be >= 0, got ", index);
  TORCH_CHECK(alpha > 0 && tau > 0,
              "ns_initial_vorticity: alpha and tau must be > 0, got alpha=", alpha, " tau=", tau);
  const int64_t r = resolution;
  gen::StandardNormals normal(seed, index);
  torch::Tensor z = torch::empty({r, r, 2}, torch::kDouble);
  normal.fill(z.data_ptr<double>(), z.numel());
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const double n = static_cast<double>(r);
  const auto k = torch::fft::fftfreq(r, 1.0 / n, f64);
  const auto k_sq = k.square().view({-1, 1}) + k.square().view({1, -1});
  const double sigma = std::pow(tau, alpha - 1.0);  // tau^(alpha - d/2), d = 2
  torch::Tensor amp =
      std::sqrt(2.0) * sigma * (4.0 * kPi * kPi * k_sq + tau * tau).pow(-alpha / 2.0);
  amp.index_put_({0, 0}, 0.0);
  const auto coeff = torch::view_as_complex(z) * amp;
  return torch::real(torch::fft::ifft2(coeff, c10::nullopt, {0, 1}, "forward")).contiguous();
}

torch::Tensor ns_paper_forcing(int64_t resolution, const torch::TensorOptions& options) {
  TORCH_CHECK(resolution >= 1, "ns_paper_forcing: resolution must be >= 1, got ", resolution);
  const auto opts = options.dtype(torch::kDouble);
  const auto t = torch::arange(resolution, opts) / static_cast<double>(resolution);
  const auto s = t.view({-1, 1}) + t.view({1, -1});  // x + y
  return 0.1 * (torch::sin(2.0 * kPi * s) + torch::cos(2.0 * kPi * s));
}

namespace {

#ifdef FNO_DATA_CUDA_KERNELS
void check_fused(const cuda::NsStatus& status) {
  TORCH_CHECK(status.ok(), "ns_solve's fused CUDA step: ", status.call, " failed (error ",
              status.code, ")");
}

/// The cuFFT plans of a fused stepper, destroyed with it.
struct FusedPlans {
  cuda::NsFftPlans plans;
  FusedPlans() = default;
  FusedPlans(const FusedPlans&) = delete;
  FusedPlans& operator=(const FusedPlans&) = delete;
  ~FusedPlans() { cuda::ns_fft_plans_destroy(&plans); }
};

/// FNO_NS_FUSED=0 turns the fused CUDA step off (read once).
bool fused_step_env() {
  static const bool on = fno::override_on("FNO_NS_FUSED");
  return on;
}
#endif

/// One solve's state, w_hat [B, R, R/2+1], and the buffers and tables of its
/// step, allocated once: on CUDA a graph captures step() and replays it on
/// the same addresses. `fused` (CUDA only, where compiled in): the step of
/// cuda/ns_step.cu on the same tables instead of LibTorch's kernels.
class NsStepper {
 public:
  NsStepper(const torch::Tensor& w0, const torch::Tensor& f, double viscosity, double dt,
            torch::Dtype real, bool fused)
      : r_(w0.size(1)) {
    const auto device = w0.device();
    const auto complex = real == torch::kFloat ? torch::kComplexFloat : torch::kComplexDouble;
    const auto ops = spectral_ops(r_, device);  // float64
    // Crank-Nicolson's factors for the diffusion.
    const auto half = 0.5 * dt * viscosity * ops.lap;
    const auto keep = (1.0 - half) / (1.0 + half);
    const auto gain = (1.0 + half).reciprocal();
    // The irfft2 of the step is unnormalized: its 1/R^2 goes into the
    // spectra's factors (exact for R a power of 2).
    const double scale = 1.0 / static_cast<double>(r_ * r_);
    // u = d psi / dy, v = -d psi / dx (psi_hat = w_hat / |k|^2), dw/dx, dw/dy, keep.
    coef_ = torch::stack({ops.iky * ops.inv_lap * scale, -ops.ikx * ops.inv_lap * scale,
                          ops.ikx * scale, ops.iky * scale, keep.to(torch::kComplexDouble)})
                .unsqueeze(1)
                .to(complex)
                .contiguous();  // [5, 1, R, R/2+1]
    // dt F_hat, dealiased, with the 1 / (1 + half) factor folded in, and
    // minus: F_hat here is the transform of u . grad(w) - f.
    minus_dt_gain_ = (-dt * gain * ops.dealias).to(complex).contiguous();
    if (f.defined()) {
      TORCH_CHECK(f.dim() == 2 && f.size(0) == r_ && f.size(1) == r_, "ns_solve: f must be [", r_,
                  ", ", r_, "], got shape ", f.sizes());
      minus_f_ = (-f.to(device, torch::kDouble)).to(real).contiguous();
    }
    w_hat_ = torch::fft::rfft2(w0.to(real), c10::nullopt, kDims).contiguous();
    const int64_t b = w0.size(0);
    advection_ = torch::empty({b, r_, r_}, w0.options().dtype(real));
#ifdef FNO_DATA_CUDA_KERNELS
    if (fused) {
      TORCH_CHECK(w0.is_cuda(), "ns_solve: the fused step runs on CUDA only");
      const c10::cuda::CUDAGuard guard(device);
      // The four spectra (overwritten by the inverse transform), their fields,
      // the advection's spectrum, and the work area of the two plans.
      spectra_ = torch::empty({4, b, r_, r_ / 2 + 1}, w_hat_.options());
      fields_ = torch::empty({4, b, r_, r_}, advection_.options());
      advection_hat_ = torch::empty_like(w_hat_);
      plans_ = std::make_unique<FusedPlans>();
      check_fused(cuda::ns_fft_plans_create(&plans_->plans, b, r_, real == torch::kDouble));
      work_ = torch::empty({static_cast<int64_t>(std::max<size_t>(plans_->plans.work_bytes, 1))},
                           w0.options().dtype(torch::kUInt8));
      check_fused(cuda::ns_fft_plans_set_work_area(plans_->plans, work_.data_ptr()));
      return;
    }
#endif
    TORCH_CHECK(!fused, "ns_solve: the fused CUDA step is not compiled in");
    spectra_ = torch::empty({5, b, r_, r_ / 2 + 1}, w_hat_.options());
  }

  /// One time step, in place.
  void step() {
#ifdef FNO_DATA_CUDA_KERNELS
    if (plans_) {
      fused_step();
      return;
    }
#endif
    // [5, B, R, R/2+1]: the spectra of u, v, dw/dx, dw/dy (over R^2), keep w_hat.
    at::mul_out(spectra_, coef_, w_hat_);
    // (irfft2 rather than its out= form, which transforms into a temporary
    // and copies; norm "forward" leaves the inverse unscaled.)
    const auto fields = torch::fft::irfft2(spectra_.narrow(0, 0, 4), torch::IntArrayRef{r_, r_},
                                           {2, 3}, "forward");  // [4, B, R, R]
    // u . grad(w) - f
    if (minus_f_.defined()) {
      at::addcmul_out(advection_, minus_f_, fields[0], fields[2]);
    } else {
      at::mul_out(advection_, fields[0], fields[2]);
    }
    advection_.addcmul_(fields[1], fields[3]);
    const auto advection_hat = torch::fft::rfft2(advection_, c10::nullopt, kDims);
    // keep w_hat - dt gain dealias (F_hat - f_hat)
    at::addcmul_out(w_hat_, spectra_[4], advection_hat, minus_dt_gain_);
  }

  /// The field on the grid, [B, R, R].
  torch::Tensor field() const {
    return torch::fft::irfft2(w_hat_, torch::IntArrayRef{r_, r_}, kDims);
  }
  bool finite() const { return torch::isfinite(torch::view_as_real(w_hat_)).all().item<bool>(); }
  torch::Tensor& w_hat() { return w_hat_; }

 private:
#ifdef FNO_DATA_CUDA_KERNELS
  // The step of cuda/ns_step.cu on the current stream: the same products and
  // sums, rounded alike, with cuFFT called directly (its inverse transform
  // overwrites spectra_, which the next step writes again).
  void fused_step() {
    const c10::cuda::CUDAGuard guard(w_hat_.device());
    cuda::NsStepArgs a;
    a.w_hat = w_hat_.data_ptr();
    a.spectra = spectra_.data_ptr();
    a.fields = fields_.data_ptr();
    a.advection = advection_.data_ptr();
    a.advection_hat = advection_hat_.data_ptr();
    a.coef = coef_.data_ptr();  // [5, 1, R, R/2+1]: planes of R (R/2+1)
    a.minus_dt_gain = minus_dt_gain_.data_ptr();
    a.minus_f = minus_f_.defined() ? minus_f_.data_ptr() : nullptr;
    a.batch = w_hat_.size(0);
    a.r = r_;
    a.f64 = w_hat_.scalar_type() == torch::kComplexDouble;
    check_fused(cuda::ns_step(plans_->plans, a,
                              c10::cuda::getCurrentCUDAStream(w_hat_.device().index()).stream()));
  }
#endif

  int64_t r_;
  torch::Tensor coef_, minus_dt_gain_, minus_f_;
  torch::Tensor w_hat_, spectra_, advection_;
#ifdef FNO_DATA_CUDA_KERNELS
  // The fused step's: its fields, the advection's spectrum, cuFFT's work area
  // and plans (null: the LibTorch step).
  torch::Tensor fields_, advection_hat_, work_;
  std::unique_ptr<FusedPlans> plans_;
#endif
};

#ifdef FNO_DATA_CUDA
/// `steps` steps of a stepper, captured once as a CUDA graph on a side stream
/// (after a warm-up step on a copy of the state, so that cuFFT's plans exist)
/// and replayed on the current stream.
class StepGraph {
 public:
  StepGraph(NsStepper& stepper, int64_t steps) {
    const auto device = stepper.w_hat().device();
    const auto saved = stepper.w_hat().clone();
    stepper.step();
    stepper.w_hat().copy_(saved);
    c10::cuda::device_synchronize();
    const auto side = c10::cuda::getStreamFromPool(false, device.index());
    {
      const c10::cuda::CUDAStreamGuard guard(side);
      graph_.capture_begin();
      for (int64_t s = 0; s < steps; ++s) stepper.step();
      graph_.capture_end();
    }
    c10::cuda::device_synchronize();
  }
  void replay() { graph_.replay(); }

 private:
  at::cuda::CUDAGraph graph_;
};
#endif

std::string blow_up_text(int64_t step, double dt) {
  return "the vorticity is not finite after step " + std::to_string(step) +
         " (t = " + number_text(static_cast<double>(step) * dt) +
         "): the run blew up; try a smaller --dt (now " + number_text(dt) + ")";
}

}  // namespace

torch::Tensor ns_solve(const torch::Tensor& w0, const torch::Tensor& f, double viscosity, double dt,
                       int64_t steps_per_record, int64_t records, const NsSolveOptions& options,
                       const std::function<void(int64_t)>& on_record) {
  TORCH_CHECK(w0.dim() == 3 && w0.size(1) == w0.size(2) && w0.size(1) >= 2 && w0.size(1) % 2 == 0,
              "ns_solve: w0 must be [B, R, R] with R even, got shape ", w0.sizes());
  TORCH_CHECK(viscosity > 0 && dt > 0, "ns_solve: viscosity and dt must be > 0, got ", viscosity,
              " and ", dt);
  TORCH_CHECK(steps_per_record >= 1 && records >= 1,
              "ns_solve: steps_per_record and records must be >= 1, got ", steps_per_record,
              " and ", records);
  const auto real = options.precision();
  TORCH_CHECK(real == torch::kDouble || real == torch::kFloat,
              "ns_solve: precision must be float64 or float32, got ", real);
  const int64_t k = options.subsample();
  TORCH_CHECK(k >= 1 && w0.size(1) % k == 0, "ns_solve: subsample ", k,
              " does not divide the resolution ", w0.size(1));
  TORCH_CHECK(options.graph_steps() >= 0, "ns_solve: graph_steps must be >= 0, got ",
              options.graph_steps());
  torch::NoGradGuard no_grad;
  const int64_t b = w0.size(0), r = w0.size(1);
  NsStepper stepper(w0, f, viscosity, dt, real,
                    w0.is_cuda() && options.fused() && ns_fused_step_available());
  // Steps per graph replay, and the replays per record (the rest of a record's
  // steps run eagerly).
  int64_t graph_steps = 0, replays = 0;
#ifdef FNO_DATA_CUDA
  std::unique_ptr<StepGraph> graph;
  if (w0.is_cuda() && options.cuda_graph()) {
    graph_steps = options.graph_steps() > 0 ? std::min(options.graph_steps(), steps_per_record)
                                            : std::min<int64_t>(steps_per_record, 100);
    replays = steps_per_record / graph_steps;
    const c10::cuda::CUDAGuard device_guard(w0.device());
    graph = std::make_unique<StepGraph>(stepper, graph_steps);
  }
#endif
  auto out = torch::empty({b, r / k, r / k, records}, w0.options().dtype(real));
  torch::Tensor start;  // w_hat at the record's start, to find a blow-up's step
  for (int64_t rec = 0; rec < records; ++rec) {
    if (start.defined()) {
      start.copy_(stepper.w_hat());
    } else {
      start = stepper.w_hat().clone();
    }
#ifdef FNO_DATA_CUDA
    for (int64_t g = 0; g < replays; ++g) graph->replay();
#endif
    for (int64_t s = replays * graph_steps; s < steps_per_record; ++s) stepper.step();
    if (!stepper.finite()) {
      // Non-finite entries of w_hat stay so: solve the record again from its
      // start, one step at a time, checking each (the same kernels as the graph's).
      stepper.w_hat().copy_(start);
      const int64_t first = rec * steps_per_record;
      for (int64_t s = 1; s <= steps_per_record; ++s) {
        stepper.step();
        if (!stepper.finite()) throw NsBlowUp(first + s, blow_up_text(first + s, dt));
      }
      throw NsBlowUp(first + steps_per_record,
                     blow_up_text(first + steps_per_record, dt) +
                         " (the step-by-step solve of the record did not reproduce it)");
    }
    out.select(3, rec).copy_(gen::every_kth(stepper.field(), k, 2));
    if (on_record) on_record(rec);
  }
  return out;
}

torch::Tensor ns_solve(const torch::Tensor& w0, const torch::Tensor& f, double viscosity, double dt,
                       int64_t steps_per_record, int64_t records,
                       const std::function<void(int64_t)>& on_record) {
  return ns_solve(w0, f, viscosity, dt, steps_per_record, records, NsSolveOptions(), on_record);
}

bool ns_fused_step_available() {
#ifdef FNO_DATA_CUDA_KERNELS
  return fused_step_env();
#else
  return false;
#endif
}

int64_t ns_bytes_per_sample(int64_t resolution, int64_t subsample, int64_t records,
                            torch::Dtype precision) {
  const int64_t e = precision == torch::kFloat ? 4 : 8;
  const int64_t r = resolution, stored = resolution / std::max<int64_t>(subsample, 1);
  const int64_t spectrum = r * (r / 2 + 1) * 2 * e, field = r * r * e;
  // The LibTorch step's, the larger: spectra: w_hat, the record's start, the
  // step's five, the inverse FFT's copy of its four input spectra, cuFFT's
  // work area (taken as four), the advection's. Fields: the four, the
  // advection, the record's field. The initial field (float64) and the
  // records. (The fused CUDA step keeps four spectra instead of five and no
  // copy of them: 11 spectra with its work area taken as four, the same
  // fields.)
  return 16 * spectrum + 6 * field + r * r * 8 + stored * stored * records * e;
}

int64_t ns_auto_batch(int64_t resolution, int64_t subsample, int64_t records,
                      torch::Dtype precision, int64_t samples, int64_t free_bytes) {
  const int64_t per = ns_bytes_per_sample(resolution, subsample, records, precision);
  // Half the free memory: room for the allocator's rounding and CUDA graphs' pools.
  int64_t fit = std::max<int64_t>(free_bytes / 2 / per, 1);
  int64_t batch = 1;
  while (batch * 2 <= fit) batch *= 2;
  return std::clamp<int64_t>(std::min(batch, samples), 1, kNsMaxAutoBatch);
}

namespace {

// Every check but the initial file's.
void check_options(const NavierStokesGenOptions& o) {
  TORCH_CHECK_VALUE(
      o.resolution() >= 8 && o.resolution() <= kNsMaxResolution && o.resolution() % 2 == 0,
      "resolution must be even and in [8, ", kNsMaxResolution, "], got ", o.resolution());
  gen::check_sample_counts(o.samples(), o.test_samples());
  TORCH_CHECK_VALUE(o.subsample() >= 1 && o.resolution() % o.subsample() == 0, "subsample ",
                    o.subsample(), " does not divide resolution = ", o.resolution(),
                    " (the periodic grid must stay uniform)");
  TORCH_CHECK_VALUE(std::isfinite(o.viscosity()) && o.viscosity() > 0,
                    "viscosity must be > 0, got ", o.viscosity());
  TORCH_CHECK_VALUE(std::isfinite(o.dt()) && o.dt() > 0, "dt must be > 0, got ", o.dt());
  TORCH_CHECK_VALUE(std::isfinite(o.record_every()) && o.record_every() > 0,
                    "record_every must be > 0, got ", o.record_every());
  TORCH_CHECK_VALUE(std::isfinite(o.t_final()) && o.t_final() > 0, "t_final must be > 0, got ",
                    o.t_final());
  TORCH_CHECK_VALUE(is_whole(o.record_every() / o.dt()), "record_every (", o.record_every(),
                    ") must be a whole number of steps of dt (", o.dt(), ")");
  TORCH_CHECK_VALUE(is_whole(o.t_final() / o.record_every()), "t_final (", o.t_final(),
                    ") must be a whole number of records of record_every (", o.record_every(), ")");
  TORCH_CHECK_VALUE(std::round(o.t_final() / o.record_every()) <= kMaxRecords, "t_final / ",
                    "record_every must be at most ", kMaxRecords, " records, got ",
                    std::round(o.t_final() / o.record_every()));
  {
    // The time steps of a sample, t_final / dt, counted in 64 bits (and exact
    // in a double): a tiny dt would overflow them.
    const double steps =
        std::round(o.record_every() / o.dt()) * std::round(o.t_final() / o.record_every());
    TORCH_CHECK_VALUE(steps <= kMaxSteps, "--dt ", o.dt(), " makes t_final / dt = ", steps,
                      " time steps per sample, over 2^53: a larger --dt or a smaller --t-final");
  }
  TORCH_CHECK_VALUE(o.forcing() == "paper" || o.forcing() == "none", "forcing must be paper or ",
                    "none, got '", o.forcing(), "'");
  TORCH_CHECK_VALUE(o.precision() == "float64" || o.precision() == "float32",
                    "precision must be float64 or float32, got '", o.precision(), "'");
  TORCH_CHECK_VALUE(std::isfinite(o.alpha()) && o.alpha() > 0, "alpha must be > 0, got ",
                    o.alpha());
  TORCH_CHECK_VALUE(std::isfinite(o.tau()) && o.tau() > 0, "tau must be > 0, got ", o.tau());
  {
    // The records' bytes, samples x R'^2 x T x 4, must stay inside 64 bits (HDF5).
    const double stored = static_cast<double>(o.resolution() / o.subsample());
    const double bytes = static_cast<double>(o.samples()) * stored * stored *
                         std::round(o.t_final() / o.record_every()) * 4.0;
    TORCH_CHECK_VALUE(bytes < 0x1p62, "samples x stored grid x records is ", bytes,
                      " bytes of records, over 2^62: fewer samples, records or grid points");
  }
  gen::check_batch_out_device(o.batch_size(), o.out(), navier_stokes_output_paths(o), o.device());
}

}  // namespace

void validate_navier_stokes_options(const NavierStokesGenOptions& o) {
  check_options(o);
  if (!o.initial().empty()) load_initial(o);
}

std::pair<int64_t, int64_t> ns_schedule(const NavierStokesGenOptions& o) {
  return {std::llround(o.record_every() / o.dt()), std::llround(o.t_final() / o.record_every())};
}

std::vector<std::string> navier_stokes_output_paths(const NavierStokesGenOptions& o) {
  return gen::output_paths(o.out(), o.test_samples());
}

namespace {

// The automatic batch on a CUDA device, from its free memory.
int64_t cuda_auto_batch(const NavierStokesGenOptions& o, const torch::Device& device,
                        int64_t records, torch::Dtype precision) {
  int64_t free_bytes = int64_t{1} << 30;
#ifdef FNO_DATA_CUDA
  const c10::cuda::CUDAGuard guard(device);
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) free_bytes = static_cast<int64_t>(free);
#endif
  return ns_auto_batch(o.resolution(), o.subsample(), records, precision, o.samples(), free_bytes);
}

}  // namespace

namespace {

/// The root attributes of one output file.
std::vector<Attribute> ns_attributes(const NavierStokesGenOptions& o,
                                     const gen::GenOutput::Part& part, int64_t total,
                                     int64_t records, int64_t steps_per_record,
                                     const torch::Device& device, int64_t batch_size) {
  using gen::number_attr;
  using gen::text_attr;
  const int64_t r = o.resolution();
  const int64_t k = o.subsample();
  const int64_t stored = r / k;
  std::vector<Attribute> attrs{
      text_attr("generator",
                "fno_datagen --problem ns: 2D incompressible Navier-Stokes in vorticity form "
                "on the unit torus, as in the FNO paper"),
      number_attr("generator_version", kNsGeneratorVersion),
      text_attr("problem", "ns"),
      text_attr("equation",
                "dw/dt + u.grad(w) = nu Laplace(w) + f, u = (dpsi/dy, -dpsi/dx), "
                "-Laplace(psi) = w, on [0,1)^2 periodic"),
      text_attr("layout",
                "a = w(t=0): (sample, i, j); u = w at t = (r+1) record_every: (sample, i, j, "
                "r); point (i, j) at (x, y) = (i, j) / R'"),
      number_attr("viscosity", o.viscosity()),
      number_attr("dt", o.dt()),
      number_attr("t_final", o.t_final()),
      number_attr("record_every", o.record_every()),
      number_attr("records", static_cast<double>(records)),
      number_attr("steps_per_record", static_cast<double>(steps_per_record)),
      text_attr("forcing",
                o.forcing() == "paper" ? "0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y)))" : "none"),
      text_attr("scheme",
                "pseudo-spectral, " + o.precision() +
                    ", real half spectrum; 2/3-rule dealiasing of u.grad(w); Crank-Nicolson "
                    "diffusion, explicit Euler advection and forcing (the paper's ns_2d.py)"),
      text_attr("precision", o.precision()),
  };
  gen::append(attrs, gen::grid_attrs(r, k, stored));
  gen::append(attrs, gen::split_attrs(part.split, part.count, part.first, total));
  attrs.push_back(text_attr("device", device.is_cuda() ? "cuda" : "cpu"));
  // On CUDA the batch's cuFFT plans may round differently from another batch's.
  if (device.is_cuda()) {
    attrs.push_back(number_attr("cuda_batch", static_cast<double>(batch_size)));
  }
  attrs.push_back(text_attr("command_line", o.command_line()));
  if (o.initial().empty()) {
    attrs.push_back(
        text_attr("initial",
                  "Gaussian random field: Re ifft2(sqrt(2) tau^(alpha-1) (4 pi^2 |k|^2 + "
                  "tau^2)^(-alpha/2) (z1 + i z2)), zero mean (the paper's GaussianRF)"));
    attrs.push_back(number_attr("alpha", o.alpha()));
    attrs.push_back(number_attr("tau", o.tau()));
    gen::append(attrs, gen::seed_attrs(o.seed()));
  } else {
    attrs.push_back(text_attr("initial", "w0 of " + o.initial()));
  }
  return attrs;
}

/// The sampler and solver of the generator's batches.
struct NsBatches {
  const NavierStokesGenOptions& o;
  const torch::Tensor& initial;  // the --initial file's fields, or undefined: the GRF
  const torch::Tensor& forcing;  // [R, R] on the device, or undefined: none
  torch::Device device;
  int64_t steps_per_record = 0, records = 0;
  NsSolveOptions solve_options;
  double solve_seconds = 0;  // the time in the solver (device to host included)

  /// Samples [start, start + b): a (the initial vorticity) and u (the records).
  gen::GenBatch operator()(int64_t start, int64_t b, const gen::BatchContext& ctx) {
    torch::Tensor w0;
    if (initial.defined()) {
      w0 = initial.narrow(0, start, b);
    } else {
      std::vector<torch::Tensor> fields;
      for (int64_t i = 0; i < b; ++i) {
        fields.push_back(
            ns_initial_vorticity(o.seed(), start + i, o.resolution(), o.alpha(), o.tau()));
      }
      w0 = torch::stack(fields);
    }
    w0 = w0.to(device);
    // Samples [first, first + count) solved together: after each record, the
    // stop request and the progress in records.
    const auto solve = [&](int64_t first, int64_t count) {
      return ns_solve(w0.narrow(0, first - start, count), forcing, o.viscosity(), o.dt(),
                      steps_per_record, records, solve_options, [&](int64_t rec) {
                        ctx.check_stop(first);
                        ctx.progress((first - start) * records + (rec + 1) * count);
                      });
    };
    const auto solve_t0 = std::chrono::steady_clock::now();
    torch::Tensor u;
    if (device.is_cpu()) {
      // One sample at a time: its numbers are then its own whatever the batch.
      std::vector<torch::Tensor> us;
      for (int64_t i = 0; i < b; ++i) us.push_back(solve(start + i, 1));
      u = torch::cat(us);
    } else {
      u = solve(start, b);
    }
    const torch::Tensor a32 = gen::every_kth(w0, o.subsample(), 2).to(torch::kCPU, torch::kFloat);
    const torch::Tensor u32 = u.to(torch::kCPU, torch::kFloat);  // (subsampled by the solve)
    solve_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - solve_t0).count();
    TORCH_CHECK(torch::isfinite(u32).all().item<bool>(), "samples ", start, "..", start + b - 1,
                ": the vorticity exceeds float32's range");
    // The largest |w| of each sample, stored (a and u).
    const torch::Tensor max_abs =
        torch::maximum(a32.abs().flatten(1).amax(1), u32.abs().flatten(1).amax(1));
    return gen::GenBatch{{a32, u32}, {{"max_abs", max_abs}}};
  }
};

}  // namespace

GenSummary generate_navier_stokes(const NavierStokesGenOptions& o, const GenHooks& hooks) {
  check_options(o);
  // A resumable run pins the initial file's contents, not only its path: a
  // file changed between runs would mix two sets of initial fields.
  const std::string initial_contents = o.initial().empty() ? "none"
                                       : hooks.resume ? to_string(file_fingerprint(o.initial()))
                                                      : "unpinned";
  // (read once: load_initial checks it as validate_navier_stokes_options does)
  const torch::Tensor initial = o.initial().empty() ? torch::Tensor() : load_initial(o);
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  const torch::Device device = gen::resolve_device(o.device());
  const auto [steps_per_record, records] = ns_schedule(o);
  const int64_t r = o.resolution();
  const int64_t k = o.subsample();
  const int64_t stored = r / k;
  const int64_t total = o.samples();
  const torch::Tensor forcing = o.forcing() == "paper"
                                    ? ns_paper_forcing(r, torch::TensorOptions().device(device))
                                    : torch::Tensor();

  const torch::Dtype precision = o.precision() == "float32" ? torch::kFloat : torch::kDouble;
  const int64_t batch_size =
      o.batch_size() > 0 ? o.batch_size()
                         : (device.is_cuda() ? cuda_auto_batch(o, device, records, precision) : 1);
  using gen::format_number;
  gen::GenSpec spec;
  spec.run = {"ns", kNsGeneratorVersion, r,         total, o.test_samples(), o.seed(),
              k,    device.is_cuda(),    batch_size};
  spec.own = {{"viscosity", format_number(o.viscosity())},
              {"dt", format_number(o.dt())},
              {"t_final", format_number(o.t_final())},
              {"record_every", format_number(o.record_every())},
              {"forcing", o.forcing()},
              {"initial", o.initial().empty() ? "grf" : o.initial()},
              {"initial_contents", initial_contents},
              {"alpha", format_number(o.alpha())},
              {"tau", format_number(o.tau())},
              {"precision", o.precision()}};
  spec.out = o.out();
  spec.paths = navier_stokes_output_paths(o);
  spec.datasets = {{"a", {stored, stored}}, {"u", {stored, stored, records}}};
  spec.device = device;
  spec.units_per_sample = records;
  NsBatches batches{o,
                    initial,
                    forcing,
                    device,
                    steps_per_record,
                    records,
                    NsSolveOptions().precision(precision).cuda_graph(o.cuda_graph()).subsample(k)};
  spec.make_batch = [&](int64_t start, int64_t b, const gen::BatchContext& ctx) {
    return batches(start, b, ctx);
  };
  spec.attributes = [&](const gen::GenOutput& output, size_t p) {
    return ns_attributes(o, output.parts()[p], total, records, steps_per_record, device,
                         batch_size);
  };
  spec.summarize = [&](const gen::GenOutput& output, GenSummary& summary) {
    summary.max_abs = output.stat_max("max_abs");
    summary.solve_seconds = batches.solve_seconds;
    char line[64];
    std::snprintf(line, sizeof line, "max_abs_vorticity %.4g", summary.max_abs);
    summary.report.emplace_back(line);
    summary.report.push_back("batch " + std::to_string(summary.batch));
    std::snprintf(line, sizeof line, "solve_seconds %.3f", summary.solve_seconds);
    summary.report.emplace_back(line);
  };
  return gen::run_generator(spec, hooks, t0);
}

}  // namespace fno::data
