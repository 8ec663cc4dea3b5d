// auto's plan search (OffloadedStep under offload.policy auto): profile one
// batch entry, rank the plans by the planner's model, measure the best few on
// the real batch (tiled plans too when the whole-grid ones do not fit or pay
// much for their fit), and keep the fastest measured within the budget. The
// search passes over each trial estimated to end after settings.search_seconds
// (fno_engine/search_cap.h), stops once the cap has passed, and takes what it
// measured, or, none within the budget, the plan estimated fastest among
// those estimated to fit.
#include "offload_step_impl.h"

namespace fno {

using namespace detail;

void OffloadedStep::Impl::search(const StepBatch& b, int64_t budget) {
  Progress progress{SearchCap(settings.search_seconds)};
  search_note.clear();
  estimated_only = false;
  // A margin for step-to-step variation of the peak (allocator state, copy timing).
  const auto limit = static_cast<int64_t>(static_cast<double>(budget) * (1.0 - kMargin));
  auto candidates = whole_grid_candidates(b, budget);
  std::vector<Measured> fitting;
  Least least;
  measure(candidates, 0, b, limit, fitting, least, progress);
  double best = std::numeric_limits<double>::infinity();
  for (const auto& m : fitting) best = std::min(best, m.ms);
  // The plain step's estimate: plans much slower than it leave room for tiles.
  const double plain =
      profiled
          ? offload::estimate(profile, plan_for_policy(offload::Policy{}, stages), settings.options)
                .step_ms
          : 0;
  std::string refusal;
  if (fitting.empty() || (!progress.over() && best > kTileAbove * plain)) {
    const size_t first = candidates.size();
    for (auto& c : tiled_family(b, budget, refusal)) candidates.push_back(std::move(c));
    measure(candidates, first, b, limit, fitting, least, progress);
  }
  if (progress.cut) search_note = search_cut_note(progress.cap.seconds(), progress.trials);
  if (fitting.empty() && progress.cut) {
    if (take_estimated(candidates, limit, progress)) return;
    // The tiles were ranked under the budget, each placement at its largest
    // tile that fits it, so all of them may lie in the margin between the
    // limit and the budget, where only a measured peak could admit them:
    // unmeasured, rank them under the limit.
    std::string unused;
    auto under = tiled_family(b, limit, unused);
    if (take_estimated(under, limit, progress)) return;
  }
  if (fitting.empty() && !refusal.empty()) throw offload::BudgetError(refusal);
  if (fitting.empty()) {
    const bool tried = progress.trials > 0;
    throw offload::BudgetError(
        "offload auto: no plan keeps a step of batch " + c10::str(b.x.sizes()) + " within " +
        offload::format_bytes(budget) +
        (least.text.empty() ? std::string(tried ? ": every trial ran out of memory"
                                                : ": no plan is estimated to fit")
                            : ": the least peak measured is " + offload::format_bytes(least.peak) +
                                  " (" + least.text + ")") +
        tile_floor(b) +
        "; raise the budget (--gpu-memory-limit), or lower data.batch_size or the grid" +
        (progress.cut ? " (" + search_note + ")" : std::string()));
  }
  choose(candidates, fitting, b, budget, limit, progress);
  if (progress.cut) search_note = search_cut_note(progress.cap.seconds(), progress.trials);
}

bool OffloadedStep::Impl::take_estimated(const std::vector<Candidate>& candidates, int64_t limit,
                                         const Progress& progress) {
  std::vector<EstimatedPlan> plans;
  for (const auto& c : candidates) plans.push_back({c.estimate.peak_bytes, c.score, c.failed});
  const auto i = best_estimated(plans, limit);
  if (i < 0) return false;
  const auto& c = candidates[static_cast<size_t>(i)];
  tiled = c.tiled;
  if (c.whole) plan = *c.whole;
  estimate = c.estimate;
  estimated_only = true;
  std::cerr << "offload auto: the search reached its " << progress.cap.seconds()
            << " s cap (offload.search_seconds) after " << progress.trials
            << " trial(s) with no plan measured within the budget; taking the plan estimated "
               "fastest among those estimated to fit, unmeasured: "
            << c.text << " (estimated peak " << offload::format_bytes(c.estimate.peak_bytes) << ", "
            << c.estimate.step_ms << " ms/step)\n";
  return true;
}

std::vector<OffloadedStep::Impl::Candidate> OffloadedStep::Impl::whole_grid_candidates(
    const StepBatch& b, int64_t budget) {
  std::vector<Candidate> candidates;
  const auto& x = b.x;
  try {
    profile = profile_batch(model, stages, x);
  } catch (const c10::OutOfMemoryError&) {
    std::cerr << "offload auto: one batch entry at " << x.sizes().slice(2)
              << " cannot be profiled whole, even on a coarser grid\n";
    profiled = false;
    return candidates;
  }
  profiled = true;
  std::cerr << profile.table() << "\n";
  const auto add = [&](const offload::Plan& f) {
    const auto text = f.to_string(stages);
    for (const auto& c : candidates) {
      if (c.text == text) return;
    }
    Candidate c;
    c.whole = f;
    c.estimate = offload::estimate(profile, f, settings.options);
    c.text = text;
    // Ties (and near ties) go to the simpler plan: fewer micro-batches,
    // fewer stages off the plain level.
    int64_t moved = 0;
    for (const auto& sp : f.stages) moved += sp.level != offload::Level::kKeep;
    c.score = c.estimate.step_ms * (1.0 + 0.03 * static_cast<double>(f.micro_batches - 1) +
                                    0.005 * static_cast<double>(moved));
    candidates.push_back(std::move(c));
  };
  // The model's fastest plans of distinct level patterns within a slack of
  // the budget (the model is coarse in both directions), the plain plans,
  // the uniform recompute+offload plans the model does not put far over the
  // budget, and the model's least-memory plan.
  const bool micro = b.can_split();
  for (auto& c : offload::rank_plans(profile, budget, settings.options, kRanked, 1.25, micro)) {
    add(c.first);
  }
  // The plain plans, whenever the model thinks they may fit: on small grids
  // the model's linear scaling cannot tell them from micro-batched ones,
  // which are slower there (launch-bound steps).
  for (const auto kind : {offload::Policy::Kind::kNone, offload::Policy::Kind::kSlim}) {
    const auto f = offload::plan_for_policy(offload::Policy::of(kind), stages);
    if (offload::estimate(profile, f, settings.options).peak_bytes <= budget * 5 / 4) add(f);
  }
  // (Not those the model puts far over the budget: it overestimates their peaks
  // by up to 40%, not more, and each costs a measured step of the largest kind.)
  for (int64_t chunks = 1; chunks <= x.size(0) && chunks <= 8; chunks *= 2) {
    const auto f = offload::plan_for_policy(
        offload::Policy::of(offload::Policy::Kind::kRecomputeOffload), stages, chunks);
    if (offload::estimate(profile, f, settings.options).peak_bytes <= budget * 3 / 2) add(f);
  }
  {
    offload::Estimate e;
    bool fits = false;
    const auto f = offload::plan_for_budget(profile, 1, settings.options, &e, &fits, micro);
    if (e.peak_bytes <= budget * 3 / 2) add(f);
  }
  // Fastest estimate first.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.score < b.score; });
  return candidates;
}

std::vector<OffloadedStep::Impl::Candidate> OffloadedStep::Impl::tiled_family(
    const StepBatch& b, int64_t budget, std::string& refusal) {
  std::vector<Candidate> out;
  if (!tiled_unsupported(model).empty() || !b.can_split() || b.x.dim() < 4) return out;
  const auto ctx = tiled_context(b);
  const int64_t host = pinnable_host_bytes(settings.options.host_memory_limit());
  const auto add = [&](TiledChoice t) {
    Candidate c;
    c.estimate.peak_bytes = t.peak_bytes;
    c.estimate.step_ms = t.step_ms;
    c.text = t.to_string();
    c.score = t.step_ms;
    c.tiled = std::move(t);
    out.push_back(std::move(c));
  };
  for (auto& t : tiled_candidates(model, b.x.sizes(), budget, host, ctx, kTiledRanked)) add(t);
  // The memory model counts every tile-sized temporary as live at once, so
  // it overestimates: the fastest placement also with larger tiles (fewer,
  // faster sweeps) that it puts within kTileSlack of the budget. The
  // measured peak decides, as for every plan.
  if (!out.empty()) {
    auto plan = out.front().tiled->plan;
    const int64_t k = out.front().tiled->micro_batches;
    for (int i = 0; i < 2 && plan.tile_rows < b.x.size(2); ++i) {
      plan.tile_rows = std::min(plan.tile_rows * 2, b.x.size(2));
      auto e = estimate_tiled(model, b.x.sizes(), plan, k, ctx);
      if (static_cast<double>(e.peak_bytes) > kTileSlack * static_cast<double>(budget) ||
          e.host_bytes > host) {
        break;
      }
      add(std::move(e));
    }
  }
  if (out.empty()) {
    const auto gpu_only = tiled_candidates(model, b.x.sizes(), budget, 0, ctx, 16);
    int64_t need = std::numeric_limits<int64_t>::max();
    for (const auto& t : gpu_only) need = std::min(need, t.host_bytes);
    if (!gpu_only.empty()) {
      refusal = "offload auto: a step of batch " + c10::str(b.x.sizes()) + " fits within " +
                offload::format_bytes(budget) + " of GPU memory only in tiles whose block " +
                "inputs need " + offload::format_bytes(need) + " of pinned host memory; " +
                (settings.options.host_memory_limit() > 0 ? "offload.host_memory_limit gives "
                                                          : "the host has available ") +
                offload::format_bytes(host) +
                "; raise offload.host_memory_limit, or lower data.batch_size or the grid";
    }
  }
  return out;
}

std::string OffloadedStep::Impl::tile_floor(const StepBatch& b) const {
  if (!tiled_unsupported(model).empty() || b.x.dim() < 4) return "";
  const auto least = least_memory_tiled(model, b.x.sizes(), tiled_context(b));
  return "; in spatial tiles a step needs at least " + offload::format_bytes(least.peak_bytes) +
         " (estimated)";
}

TiledContext OffloadedStep::Impl::tiled_context(const StepBatch& b) const {
  TiledContext c;
  c.base_bytes = allocated_now();
  for (const auto& p : model->parameters()) c.grad_bytes += static_cast<int64_t>(p.nbytes());
  c.window = settings.options.max_inflight_bytes();
  c.compress = settings.options.compress() == offload::Compress::kBF16 &&
               model->options.compute_dtype() == torch::kFloat;
  c.can_split = b.can_split();
  return c;
}

void OffloadedStep::Impl::measure(std::vector<Candidate>& candidates, size_t first,
                                  const StepBatch& b, int64_t limit, std::vector<Measured>& fitting,
                                  Least& least, Progress& progress) {
  double best_ms = std::numeric_limits<double>::infinity();
  double best_score = std::numeric_limits<double>::infinity();  // the best's estimate
  const auto note_best = [&](const Measured& m) {
    if (m.ms < best_ms) {
      best_ms = m.ms;
      best_score = candidates[m.i].score;
    }
  };
  for (const auto& m : fitting) note_best(m);
  bool warm = false;
  for (size_t i = first; i < candidates.size(); ++i) {
    auto& c = candidates[i];
    if (!fitting.empty() && c.score > kSkipAbove * best_ms && c.score > kSkipAbove * best_score) {
      continue;
    }
    // Its expected length: one step (two before the first, which warms up),
    // and where it needs more pinned host memory than the pool holds, the
    // pool's growth and the step again (measured_step).
    const int64_t host = c.tiled ? c.tiled->host_bytes : c.estimate.offloaded_bytes;
    const double grow = static_cast<double>(std::max<int64_t>(0, host - pinned_seen)) /
                        static_cast<double>(int64_t{1} << 30) * kPinSecondsPerGiB;
    const double steps = (warm ? 1.0 : 2.0) + (grow > 0 ? 1.0 : 0.0);
    // (One expected to end past the cap is passed over: a later, shorter
    // one may still fit, e.g. a plan that pins no host memory.)
    if (!progress.next(steps * c.estimate.step_ms / 1e3 + grow)) {
      if (progress.over()) return;
      continue;
    }
    ++progress.trials;
    double ms = 0;
    int64_t peak = 0;
    std::string status = "ok";
    try {
      if (!warm) trial(c, b);  // cuFFT plans, workspaces, the pinned pool
      std::tie(ms, peak) = trial(c, b);
      warm = true;
    } catch (const c10::OutOfMemoryError&) {
      status = "out of memory";
      for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
      if (runner) runner->clear();
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
    std::cerr << "offload auto: trial " << c.text << ": estimated "
              << offload::format_bytes(c.estimate.peak_bytes) << ", " << c.estimate.step_ms
              << " ms; "
              << (status == "ok" ? "measured " + offload::format_bytes(peak) + ", " +
                                       std::to_string(ms) + " ms"
                                 : status)
              << "\n";
    c.failed = status != "ok" || peak > limit;
    if (status != "ok") continue;
    if (peak < least.peak) least = {peak, c.text};
    if (peak <= limit) {
      fitting.push_back({i, ms, peak});
      note_best(fitting.back());
    }
  }
}

void OffloadedStep::Impl::choose(const std::vector<Candidate>& candidates,
                                 std::vector<Measured> fitting, const StepBatch& b, int64_t budget,
                                 int64_t limit, Progress& progress) {
  std::sort(fitting.begin(), fitting.end(),
            [](const Measured& x, const Measured& y) { return x.ms < y.ms; });
  if (fitting.size() > 2) fitting.resize(2);
  if (fitting.size() == 2 && progress.next((fitting[0].ms + fitting[1].ms) / 1e3)) {
    for (auto& m : fitting) {
      const auto [ms2, peak2] = trial(candidates[m.i], b);
      m.ms = std::min(m.ms, ms2);
      m.peak = std::max(m.peak, peak2);
    }
    std::sort(fitting.begin(), fitting.end(), [&](const Measured& x, const Measured& y) {
      return (x.peak <= limit) != (y.peak <= limit) ? x.peak <= limit : x.ms < y.ms;
    });
  }
  const auto& chosen = fitting.front();
  const auto& c = candidates[chosen.i];
  tiled = c.tiled;
  if (c.whole) plan = *c.whole;
  estimate = c.estimate;
  estimate.step_ms = chosen.ms;
  estimate.peak_bytes = chosen.peak;
  if (chosen.peak > budget) {
    throw offload::BudgetError("offload auto: the best plan " + c.text + " peaked at " +
                               offload::format_bytes(chosen.peak) +
                               " when measured again, over the budget " +
                               offload::format_bytes(budget) + "; raise the budget");
  }
}

}  // namespace fno
