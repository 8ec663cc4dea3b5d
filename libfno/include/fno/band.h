// One sample across ranks: each rank holds a band of rows of the first spatial
// dim, [row0, row0 + n) of a grid of S0 rows.
//
// An FNO block is pointwise but for its spectral convolution, which keeps
// only the low modes; the kept spectrum is a sum over rows. So each rank adds
// up its band's share, one sum over ranks of the [B, C, k0, k1(, k2)] complex
// values gives every rank the whole spectrum, the channel mixing is
// replicated, and each rank makes its own rows of the output (TiledStep with
// set_band). Backward is the same in reverse: the mixing's input gradient is
// summed over ranks likewise.
//
// The losses here are global: each rank computes its rows' sums (per batch
// entry and channel), the sums are added over ranks, and the returned value is
// the loss of the whole grid on every rank. Its gradient w.r.t. the rank's
// own output is exact: loss_local = L + sum_i c_i (G_i - detach(G_i)), with
// c_i = dL/dS_i from the global, detached sums S_i, and G_i the terms of S_i
// that depend on the rank's rows. The H1 loss's central differences along
// the first dim take halo rows from each neighbour (periodic: the last rank's
// neighbour is the first): one for the values, two for the gradient (the
// differences at the neighbours' edge rows depend on this rank's edge rows),
// so that backward sends nothing. All communication is `sum` (an in-place sum
// over the ranks of one sample, e.g. c10d's all-reduce), called in the same
// order on every rank; a step or forward on a band ends with `drain` (its
// sums done), and so does whatever reads a band's sums on the host.
//
// Parameter gradients of a band are partial sums: the caller adds them over
// the ranks, as data parallel adds them over the batch.
//
// Two ways to step on a band. TiledStep::set_band (fno/tiled.h) runs it in
// tiles of rows, keeping only block inputs and remaking each block's tail
// per tile in backward: the least memory, about a quarter more compute. A
// BandGuard makes the model's ordinary autograd forward act on the band:
//
//   fno::BandGuard on_band(band);          // this thread's forwards: the band's rows
//   auto loss = fno::band_rel_loss(l2, band, model->forward(x_rows), y_rows);
//   loss.backward();                       // activations kept, as a plain step
//
// Each block's spectral convolution adds up its band's share of the kept
// spectrum (band_sum, differentiable), mixes the channels as on the whole
// grid, and makes its own rows; the grid embedding's coordinates are the
// global rows'; everything else is pointwise and unchanged.
//
// Why a thread-local guard and not the model's state (a set_band on FNO) or
// a forward of its own: like torch::NoGradGuard and fno::RecomputeCheapGuard
// it is a mode of this thread's forwards, so every caller of the model's
// forward (FNOImpl::forward, forward_lift/forward_block, offload/'s stages,
// micro-batches, a rollout's repeated forwards) runs on the band unchanged,
// while the module itself stays as it is: a clone, a checkpoint, another
// thread's forward or a whole-grid evaluation after the step never sees a
// band left set on it. Backward needs no guard: each sum's node keeps its
// band. A forward remade in backward (activation checkpointing) must run
// under the guard again; the tiled step is the band's path for those.
#pragma once

#include <fno/losses.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <utility>

namespace fno {

/// Where a rank's rows lie, and how it adds tensors up with the other ranks of
/// its sample. The default is one process: the band is the whole grid.
struct Band {
  /// The first row of this rank's band in the grid.
  int64_t row0 = 0;
  /// S0, the rows of the whole grid; 0: the input's own (one process).
  int64_t grid_rows = 0;
  /// This rank among the ranks of its sample, and how many they are.
  int64_t rank = 0;
  int64_t ranks = 1;
  /// In place: the sum over the ranks of the sample (complex: both parts).
  /// It may return before the sum is done (NCCL: ordered on the current
  /// stream, which later work reads it from); the host reads its results
  /// only after drain(). Null: one process.
  std::function<void(at::Tensor&)> sum;
  /// Waits, bounded (a lost rank is an error), for the sums in flight. Null:
  /// each sum is done when it returns.
  std::function<void()> flush;

  bool split() const { return ranks > 1; }
  /// flush, where there is one: before the host reads what the sums made.
  void drain() const {
    if (flush) flush();
  }
};

/// While alive, the FNO forwards of this thread (fno/fno.h, fno/layers.h) take
/// their input [B, C, n, *S'] as `band`'s rows [row0, row0 + n) of a grid of
/// band.grid_rows rows (see above). Guards nest; the innermost is current.
/// A 1D model and domain padding are refused (std::runtime_error naming them).
class BandGuard {
 public:
  explicit BandGuard(Band band);
  ~BandGuard();
  BandGuard(const BandGuard&) = delete;
  BandGuard& operator=(const BandGuard&) = delete;

 private:
  Band band_;
  const Band* previous_;
};
/// The band of this thread's forwards (the innermost BandGuard's), or null:
/// the input is the whole grid.
const Band* current_band();

/// x summed over the ranks of the band's sample (band.sum on a contiguous
/// copy), differentiable: backward sums the gradient over the ranks likewise,
/// since each rank's rows use the same sum differently. One process: x.
// x: [*] (complex too) -> [*], the same on every rank
at::Tensor band_sum(const Band& band, const at::Tensor& x);

/// The rows of rank r of `ranks` over a grid of `rows`: as even as can be, the
/// first rows % ranks bands one row longer. Returns {row0, n}.
std::pair<int64_t, int64_t> band_rows(int64_t rows, int64_t ranks, int64_t r);

/// The relative Lp loss (LpLoss::rel) of the whole grid, from this rank's rows.
// x, y: [B, C, n, *S'] (the rank's rows) -> scalar, the same on every rank
at::Tensor band_rel_loss(const LpLoss& loss, const Band& band, const at::Tensor& x,
                         const at::Tensor& y);
/// The relative H1 loss (H1Loss::rel) of the whole grid, from this rank's
/// rows. Across ranks the first dim must be periodic (periodic_in_x).
// x, y: [B, C, n, *S'] -> scalar, the same on every rank
at::Tensor band_rel_loss(const H1Loss& loss, const Band& band, const at::Tensor& x,
                         const at::Tensor& y);

/// x with the `k` rows just before and just after this rank's band (periodic)
/// from the neighbouring ranks, detached. Every band must have >= k rows.
// x: [B, C, n, *S'] -> [B, C, n + 2k, *S']
at::Tensor band_halo(const Band& band, const at::Tensor& x, int64_t k);

}  // namespace fno
