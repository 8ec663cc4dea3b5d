#include "offload_step_impl.h"

#include <fno/overrides.h>

namespace fno {

using namespace detail;

int64_t resolve_gpu_budget(int64_t limit) {
  return limit > 0 ? limit : offload::device_free_bytes();
}

int64_t inflight_memory_ceiling(int64_t limit) {
  if (limit > 0) return limit;
  if (offload::device_total_bytes() == 0) return 0;
  // What this process can hold: what it holds now and what the device (or its
  // cap) still gives.
  const auto held = allocated_now();
  return static_cast<int64_t>(0.9 * static_cast<double>(held + offload::device_free_bytes()));
}

int64_t oom_capacity(int64_t limit) { return limit > 0 ? limit : offload::device_total_bytes(); }

int64_t resident_data_room(int64_t limit, int64_t device_total) {
  return limit > 0 ? limit / 8 : device_total / 4;
}

std::string default_plan_cache_dir() {
  if (const char* d = override_value("FNO_PLAN_CACHE"); d != nullptr) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d) {
    return std::string(d) + "/fno/plans";
  }
  if (const char* d = std::getenv("HOME"); d != nullptr && *d) {
    return std::string(d) + "/.cache/fno/plans";
  }
  return "";
}

OffloadedStep::OffloadedStep(FNO model, OffloadSettings settings) : p_(std::make_unique<Impl>()) {
  p_->model = std::move(model);
  p_->settings = std::move(settings);
  p_->policy = p_->settings.policy;
  TORCH_CHECK(p_->settings.micro_batches >= 1, "offload: micro_batches must be >= 1, got ",
              p_->settings.micro_batches);
  const bool none = p_->policy.kind == offload::Policy::Kind::kNone;
  // With policy none, an offloader that keeps everything still records the
  // memory timeline of a step on request (CUDA only), and runs micro-batches.
  if (!none || p_->settings.micro_batches > 1 || offload::device_total_bytes() > 0) {
    auto options = p_->settings.options;
    if (p_->settings.learn_inflight && !none && p_->policy.kind != offload::Policy::Kind::kAuto &&
        offload::device_total_bytes() > 0) {
      options.inflight_memory_limit(inflight_memory_ceiling(p_->settings.gpu_memory_limit));
    }
    p_->offloader = std::make_unique<offload::Offloader>(options);
    p_->offloader->exclude(*p_->model);
  }
}

OffloadedStep::~OffloadedStep() = default;

bool OffloadedStep::offloading() const {
  return p_->policy.kind != offload::Policy::Kind::kNone && p_->offloader != nullptr &&
         p_->offloader->active();
}

bool OffloadedStep::plain() const {
  return p_->policy.kind == offload::Policy::Kind::kNone && p_->settings.micro_batches == 1 &&
         !p_->band.split();
}

bool OffloadedStep::Impl::whole_band_fits(const StepBatch& b, int64_t budget) {
  // The plain step's peak as the planner estimates it from a profile of one
  // batch entry of the band with everything kept, measured as a grid of its
  // own rows (the same tensors as the band's step, but the band's few
  // spectrum-sized sums), with the search's margin. The planner's estimate
  // of a plain step is over the measured peak, not under (offload/planner.h).
  const auto st = fno_stages(model, b.x.sizes().slice(2).vec());
  const auto drop = [&] {
    for (auto& q : model->parameters()) q.mutable_grad() = at::Tensor();
  };
  try {
    const auto prof = profile_batch(model, st, b.x);
    drop();
    const auto e =
        offload::estimate(prof, offload::plan_for_policy(offload::Policy{}, st), settings.options);
    const auto limit = static_cast<int64_t>(static_cast<double>(budget) * (1.0 - kMargin));
    std::cerr << "offload auto: the whole band of " << b.x.size(2) << " rows, activations kept: "
              << "estimated peak " << offload::format_bytes(e.peak_bytes) << " of "
              << offload::format_bytes(limit) << (e.peak_bytes <= limit ? "" : " (does not fit)")
              << "\n";
    return e.peak_bytes <= limit;
  } catch (const c10::OutOfMemoryError&) {
    drop();
    c10::cuda::CUDACachingAllocator::emptyCache();
    return false;
  }
}

void OffloadedStep::Impl::make_band_plan(const StepBatch& b) {
  using K = offload::Policy::Kind;
  shape = b.x.sizes().vec();
  plan_key_text.clear();
  const int64_t layers = model->options.n_layers();
  // Band 0 is the largest: its rows give every rank of the sample one choice.
  const int64_t rows0 = band_rows(band.grid_rows, band.ranks, 0).second;
  // (Only a step on the GPU moves tensors: a CPU step on a machine with a GPU
  // keeps everything in its own memory.)
  const bool moves = b.x.is_cuda() && offloader && offloader->active();
  const bool searched = policy.kind == K::kAuto && moves;
  // none, and auto without CUDA: the whole band, activations kept. The other
  // fixed policies: their tiled plans.
  whole_band = policy.kind == K::kNone || (policy.kind == K::kAuto && !moves);
  tiled.reset();
  if (!whole_band && !searched) {
    tiled = tiled_choice_for_policy(policy, layers, rows0, settings.chunks, settings.micro_batches,
                                    b.x.size(0), moves);
  }
  if (searched) {
    // Rank 0's choice for every rank: [whole band fits, its tiled choice ...].
    std::vector<double> mine(5 + static_cast<size_t>(layers), 0.0);
    const int64_t budget = resolve_gpu_budget(settings.gpu_memory_limit);
    if (band.rank == 0) {
      if (whole_band_fits(b, budget)) {
        mine[0] = 1;
      } else {
        const int64_t host = pinnable_host_bytes(settings.options.host_memory_limit());
        const auto found = tiled_candidates(model, b.x.sizes(), budget, host, tiled_context(b), 1);
        if (!found.empty()) {
          const auto v = encode_tiled_choice(found.front(), layers);
          std::copy(v.begin(), v.end(), mine.begin() + 1);
        }
      }
    }
    auto t = torch::tensor(mine, torch::kDouble).to(b.x.device());
    band.sum(t);
    band.drain();
    const auto all = t.cpu();
    const double* v = all.data_ptr<double>();
    whole_band = v[0] > 0.5;
    if (!whole_band) {
      auto c = decode_tiled_choice(std::vector<double>(v + 1, v + all.numel()));
      if (c.plan.tile_rows <= 0) {
        throw offload::BudgetError(
            "offload auto: neither the whole band nor a tiled plan of band 0's rows fits the "
            "budget of " +
            offload::format_bytes(budget));
      }
      tiled = c;
    }
  }
  // The plan of auto and of the fixed policies, once per choice (a shorter last
  // batch of an epoch plans again).
  const std::string said = whole_band ? "activations kept" : tiled->to_string();
  if (policy.kind != K::kNone && band.rank == 0 && said != band_plan_said) {
    band_plan_said = said;
    std::cerr << "offload " << (searched ? std::string("auto") : "policy " + settings.policy.text)
              << ": each rank's band of rows " << (whole_band ? "whole, " : "in ") << said << "\n";
  }
}

void OffloadedStep::set_band(Band band) {
  auto& p = *p_;
  p.band = std::move(band);
  if (p.runner) p.runner->set_band(p.band);
}

const Band& OffloadedStep::band() const { return p_->band; }

at::Tensor OffloadedStep::forward_backward(
    const at::Tensor& x, const std::function<at::Tensor(const at::Tensor&)>& loss) {
  StepBatch b;
  b.x = x;
  b.loss = loss;
  return p_->step(b);
}

at::Tensor OffloadedStep::forward_backward(
    const at::Tensor& x, const at::Tensor& y,
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss, bool mean) {
  TORCH_CHECK(y.dim() >= 1 && y.size(0) == x.size(0), "OffloadedStep: targets ", y.sizes(),
              " do not match the batch ", x.sizes());
  StepBatch b;
  b.x = x;
  b.y = y;
  b.loss2 = loss;
  b.mean = mean;
  return p_->step(b);
}

at::Tensor OffloadedStep::forward_backward_composite(
    const at::Tensor& x, const at::Tensor& y,
    const std::function<at::Tensor(const ModelForward&, const at::Tensor&, const at::Tensor&)>&
        loss) {
  auto& p = *p_;
  if (p.policy.kind != offload::Policy::Kind::kNone || p.settings.micro_batches != 1) {
    throw std::invalid_argument(
        "offload: a step that runs the model several times (a rollout) needs policy none and "
        "one micro-batch, got policy '" +
        p.settings.policy.text + "' and " + std::to_string(p.settings.micro_batches) +
        " micro-batch(es)");
  }
  p.record_next = false;
  // A split band: each of the model's forwards on the band's rows, activations
  // kept (the loss must be a global one, band_rel_loss).
  const bool split = p.band.split();
  auto l = loss(
      [&p, split](const at::Tensor& in) {
        std::optional<BandGuard> on_band;
        if (split) on_band.emplace(p.band);
        return p.model->forward(in);
      },
      x, y);
  if (p.before_final_backward) {
    p.before_final_backward(c10::str(l.device(), " ", x.sizes(), " composite"));
  }
  l.backward();
  p.band.drain();
  return l.detach();
}

at::Tensor OffloadedStep::forward(const at::Tensor& x) {
  const auto plan = forward_plan(x);
  return forward_under_plan(p_->model, plan, x, plan.tiled ? &p_->tiled_runner() : nullptr);
}

ForwardPlan OffloadedStep::forward_plan(const at::Tensor& x) {
  auto& p = *p_;
  using K = offload::Policy::Kind;
  const int64_t batch = x.size(0);
  const bool planned = !p.shape.empty();
  if (p.band.split()) {
    // Split across ranks: the training plan's tiles at its shape, else the
    // band in one tile; as many samples at once as a training micro-batch
    // holds (all of x before the first step): the same on every rank of the
    // sample, whose bands may differ in rows.
    ForwardPlan f;
    f.micro = batch;
    if (planned && (p.tiled || p.whole_band)) {
      const int64_t k =
          std::max<int64_t>(p.tiled ? p.tiled->micro_batches : p.settings.micro_batches, 1);
      f.micro = std::max<int64_t>(1, (p.shape[0] + k - 1) / k);
    }
    const bool same = planned && p.tiled && x.sizes().slice(1) == at::IntArrayRef(p.shape).slice(1);
    TiledChoice c;
    c.plan.tile_rows = x.size(2);
    f.tiled = same ? *p.tiled : c;
    f.text = same ? "the training plan's tiles, " + p.tiled->plan.to_string()
                  : "this rank's band of " + std::to_string(x.size(2)) + " rows in one tile";
    f.text += ", at most " + std::to_string(f.micro) + " sample(s) at once";
    return f;
  }
  if (planned && x.sizes().slice(1) == at::IntArrayRef(p.shape).slice(1)) {
    // The training plan's grid: its tiles, and at most a micro-batch at once.
    ForwardPlan f;
    f.micro = batch;
    if (p.policy.kind != K::kNone) {
      const int64_t k = p.tiled                     ? p.tiled->micro_batches
                        : p.policy.kind == K::kAuto ? p.plan.micro_batches
                                                    : p.settings.micro_batches;
      f.micro = std::max<int64_t>(1, (p.shape[0] + k - 1) / std::max<int64_t>(k, 1));
    }
    f.tiled = p.tiled;
    f.text = (p.tiled ? "the training plan's tiles, " + p.tiled->plan.to_string() + ", "
                      : std::string("whole grid, ")) +
             "at most " + std::to_string(f.micro) + " sample(s) at once (the training plan's)";
    return f;
  }
  const int64_t limit = p.settings.gpu_memory_limit;
  if (!x.is_cuda() || (p.policy.kind == K::kNone && limit <= 0)) {
    ForwardPlan f;
    f.micro = batch;
    f.text = "whole grid, batches of " + std::to_string(batch);
    return f;
  }
  const auto key = x.sizes().vec();
  if (const auto it = p.forward_plans.find(key); it != p.forward_plans.end()) return it->second;
  // The budget of a forward beside what the run holds (the weights, which the
  // planner counts itself, the optimizer's state, the data kept on the GPU).
  int64_t weights = 0;
  for (const auto& q : p.model->parameters()) weights += q.numel() * q.element_size();
  const int64_t room = limit > 0 ? limit - allocated_now() : offload::device_free_bytes();
  const auto budget = ForwardBudget().gpu_memory_limit(std::max<int64_t>(1, room + weights));
  auto f =
      choose_forward_plan(p.model, x.sizes(), budget, x.device(),
                          static_cast<int64_t>(c10::elementSize(p.model->options.compute_dtype())));
  std::cerr << "offload: a forward of " << x.sizes()
            << " (off the training plan's grid): " << f.text << "\n";
  return p.forward_plans.emplace(key, std::move(f)).first->second;
}

std::string OffloadedStep::plan_text() const {
  if (p_->policy.kind == offload::Policy::Kind::kNone) return "none";
  std::ostringstream o;
  o << p_->plan_text_only();
  if (p_->profiled || !p_->search_note.empty()) {
    o << " (auto: " << (p_->estimated_only ? "estimated, not measured: peak " : "measured peak ")
      << offload::format_bytes(p_->estimate.peak_bytes) << ", " << p_->estimate.step_ms
      << " ms/step" << (p_->search_note.empty() ? "" : "; " + p_->search_note) << ")";
  }
  return o.str();
}

std::string OffloadedStep::describe() const {
  if (p_->policy.kind == offload::Policy::Kind::kNone || !p_->offloader) {
    return "offload: none";
  }
  return "offload policy " + p_->settings.policy.text + "; " + p_->offloader->describe();
}

void OffloadedStep::set_before_final_backward(std::function<void(const std::string&)> fn) {
  p_->before_final_backward = std::move(fn);
}

const offload::StepStats& OffloadedStep::last_stats() const { return p_->stats; }
const OffloadSettings& OffloadedStep::settings() const { return p_->settings; }
const offload::Profile& OffloadedStep::profile() const { return p_->profile; }
const offload::Estimate& OffloadedStep::estimate() const { return p_->estimate; }
void OffloadedStep::record_next_timeline() { p_->record_next = true; }

bool OffloadedStep::timeline_requested() const { return p_->record_next; }
double OffloadedStep::plan_seconds() const { return p_->plan_seconds; }

StepMemoryAdvice OffloadedStep::out_of_memory_advice(const at::Tensor& x) {
  auto& p = *p_;
  for (auto& param : p.model->parameters()) param.mutable_grad() = at::Tensor();
  if (x.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
  StepMemoryAdvice a;
  a.batch = x.size(0);
  const int64_t capacity = oom_capacity(p.settings.gpu_memory_limit);
  a.fixed.capacity = capacity;
  const auto budget = static_cast<int64_t>(0.9 * static_cast<double>(capacity));
  // What auto would do where no fixed policy fits: micro-batches or tiles.
  const auto add_tiles = [&] {
    TiledContext ctx;
    ctx.base_bytes = allocated_now();
    for (const auto& q : p.model->parameters()) ctx.grad_bytes += static_cast<int64_t>(q.nbytes());
    const int64_t host = pinnable_host_bytes(p.settings.options.host_memory_limit());
    const auto tiles = tiled_candidates(p.model, x.sizes(), budget, host, ctx, 1);
    if (tiles.empty()) return;
    a.auto_tiles = true;
    a.tiles_peak = tiles[0].peak_bytes;
    a.tiles_host = tiles[0].host_bytes;
  };
  try {
    const auto stages = fno_stages(p.model, x.sizes().slice(2).vec());
    const auto profile = profile_batch(p.model, stages, x);
    a.profiled = true;
    a.fixed =
        offload::out_of_memory_advice(profile, p.settings.policy, capacity, p.settings.options);
    if (!a.fixed.fits) {
      bool fits = false;
      const auto plan = offload::plan_for_budget(profile, budget, p.settings.options,
                                                 &a.auto_estimate, &fits, true);
      if (fits) a.auto_micro_batches = plan.micro_batches;
      if (!fits) add_tiles();
    }
  } catch (const std::exception&) {
    for (auto& param : p.model->parameters()) param.mutable_grad() = at::Tensor();
    c10::cuda::CUDACachingAllocator::emptyCache();
    a.profiled = false;
    add_tiles();
  }
  return a;
}

std::string estimate_policies(FNO model, const at::Tensor& x, const OffloadSettings& settings) {
  const auto stages = fno_stages(model, x.sizes().slice(2).vec());
  const auto profile = profile_batch(model, stages, x);
  for (const auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
  std::ostringstream o;
  o << profile.table() << "\n";
  using K = offload::Policy::Kind;
  for (const auto& policy :
       {offload::Policy::of(K::kNone), offload::Policy::of(K::kSlim), offload::Policy::of(K::kAll),
        offload::Policy::of(K::kBlocks, 2), offload::Policy::of(K::kRecompute),
        offload::Policy::of(K::kRecomputeOffload)}) {
    const auto& name = policy.text;
    const auto plan = offload::plan_for_policy(policy, stages, settings.chunks);
    const auto e = offload::estimate(profile, plan, settings.options);
    o << "  " << name << ": estimated peak " << offload::format_bytes(e.peak_bytes) << " ("
      << e.peak_at << "), " << e.step_ms << " ms/step\n";
  }
  const int64_t budget = resolve_gpu_budget(settings.gpu_memory_limit);
  offload::Estimate e;
  bool fits = false;
  const auto plan = offload::plan_for_budget(profile, budget, settings.options, &e, &fits);
  o << "  auto (budget " << offload::format_bytes(budget) << "): " << plan.to_string(stages)
    << "; estimated peak " << offload::format_bytes(e.peak_bytes) << ", " << e.step_ms << " ms/step"
    << (fits ? "" : " (does not fit)") << "\n";
  return o.str();
}

}  // namespace fno
