#include <fno_engine/tiled_runner.h>

#include <fno_offload/planner.h>

#include <torch/torch.h>

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

at::Tensor TiledRunner::step(const TiledChoice& choice, const at::Tensor& x, const at::Tensor& y,
                             const Loss& loss, bool mean,
                             const std::function<void()>& before_last) {
  auto& tiled = step_for(choice.plan);
  const int64_t batch = x.size(0);
  const auto sizes = offload::split_sizes(batch, std::min(choice.micro_batches, batch));
  at::Tensor total;
  int64_t first = 0;
  for (size_t m = 0; m < sizes.size(); ++m) {
    const int64_t n = sizes[m];
    if (m + 1 == sizes.size() && before_last) before_last();
    // The gradients of the micro-batches add up; a mean loss weighs each by its share.
    const double share = static_cast<double>(n) / static_cast<double>(batch);
    const auto l = tiled.forward_backward(x.narrow(0, first, n), y.narrow(0, first, n),
                                          [&](const at::Tensor& out, const at::Tensor& yy) {
                                            auto v = loss(out, yy);
                                            return mean && sizes.size() > 1 ? v * share : v;
                                          });
    total = total.defined() ? total + l : l;
    first += n;
  }
  return total;
}

at::Tensor TiledRunner::forward(const TiledPlan& plan, const at::Tensor& x) {
  torch::NoGradGuard no_grad;
  return step_for(plan).forward(x);
}

}  // namespace fno
