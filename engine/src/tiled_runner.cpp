#include <fno_engine/tiled_runner.h>

#include <fno_offload/planner.h>

#include <torch/torch.h>

#include <optional>

namespace fno {

TiledRunner::TiledRunner(FNO model, offload::Offloader* offloader)
    : model_(std::move(model)), offloader_(offloader) {}

TiledStep& TiledRunner::step_for(const TiledPlan& plan) {
  auto& s = steps_[plan.to_string()];
  if (!s) {
    TileStoreFactory host;
    if (offloader_ != nullptr && offloader_->active()) {
      host = [off = offloader_](const std::string& name) {
        return std::make_unique<PinnedTileStore>(*off, name);
      };
    }
    s = std::make_unique<TiledStep>(model_, plan, host);
    s->set_band(band_);
  }
  return *s;
}

void TiledRunner::set_band(const Band& band) {
  band_ = band;
  for (auto& [key, s] : steps_) s->set_band(band_);
}

namespace {

// `micro_batches` steps of (x, y) whose gradients add up, each by
// run(x_m, y_m, loss_m), which returns its loss detached; a mean loss weighs
// each by its share of the batch. `before_last` runs before the last.
at::Tensor micro_steps(const at::Tensor& x, const at::Tensor& y, int64_t micro_batches,
                       const TiledRunner::Loss& loss, bool mean,
                       const std::function<void()>& before_last,
                       const std::function<at::Tensor(const at::Tensor&, const at::Tensor&,
                                                      const TiledRunner::Loss&)>& run) {
  const int64_t batch = x.size(0);
  const auto sizes = offload::split_sizes(batch, std::min(micro_batches, batch));
  at::Tensor total;
  int64_t first = 0;
  for (size_t m = 0; m < sizes.size(); ++m) {
    const int64_t n = sizes[m];
    if (m + 1 == sizes.size() && before_last) before_last();
    const double share = static_cast<double>(n) / static_cast<double>(batch);
    const auto l = run(x.narrow(0, first, n), y.narrow(0, first, n),
                       [&](const at::Tensor& out, const at::Tensor& yy) {
                         auto v = loss(out, yy);
                         return mean && sizes.size() > 1 ? v * share : v;
                       });
    total = total.defined() ? total + l : l;
    first += n;
  }
  return total;
}

}  // namespace

at::Tensor TiledRunner::step(const TiledChoice& choice, const at::Tensor& x, const at::Tensor& y,
                             const Loss& loss, bool mean,
                             const std::function<void()>& before_last) {
  auto& tiled = step_for(choice.plan);
  return micro_steps(x, y, choice.micro_batches, loss, mean, before_last,
                     [&](const at::Tensor& xm, const at::Tensor& ym, const Loss& lm) {
                       return tiled.forward_backward(xm, ym, lm);
                     });
}

at::Tensor TiledRunner::step_whole(const at::Tensor& x, const at::Tensor& y, const Loss& loss,
                                   bool mean, int64_t micro_batches,
                                   const std::function<void()>& before_last) {
  TORCH_CHECK(micro_batches >= 1, "TiledRunner: micro_batches must be >= 1, got ", micro_batches);
  return micro_steps(x, y, micro_batches, loss, mean, before_last,
                     [&](const at::Tensor& xm, const at::Tensor& ym, const Loss& lm) {
                       torch::AutoGradMode grad_mode(true);
                       at::Tensor out;
                       {
                         // x_m: [b, Cin, n, *S'] -> [b, Cout, n, *S'], the band's rows
                         std::optional<BandGuard> on_band;
                         if (band_.grid_rows > 0) on_band.emplace(band_);
                         out = model_->forward(xm);
                       }
                       auto l = lm(out, ym);
                       l.backward();
                       band_.drain();
                       return l.detach();
                     });
}

at::Tensor TiledRunner::forward(const TiledPlan& plan, const at::Tensor& x) {
  torch::NoGradGuard no_grad;
  return step_for(plan).forward(x);
}

}  // namespace fno
