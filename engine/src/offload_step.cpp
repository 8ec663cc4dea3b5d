#include <fno_engine/offload_step.h>

#include <fno/serialize.h>
#include <fno_engine/staged.h>
#include <fno_engine/tiled_plan.h>

#include <fno_engine/tiled_runner.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/util/hash.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace fno {
namespace {

// The per-stage profile of one batch entry of x (everything kept), scaled to
// x's batch. When one entry does not fit with everything kept (the profile
// keeps all, whatever the plan will be), a coarser grid is measured, halving
// each spatial dim until it fits, and scaled up by the number of grid points:
// activations grow with them, and so, closely, does the time.
offload::Profile profile_batch(FNO& model, const std::vector<offload::Stage>& stages,
                               const at::Tensor& x) {
  const auto loss = [](const at::Tensor& y) { return y.pow(2).sum(); };
  auto one = x.narrow(0, 0, 1);
  for (int halvings = 0;; ++halvings) {
    try {
      const auto spatial = one.sizes().slice(2).vec();
      const auto st = halvings == 0 ? stages : fno_stages(model, spatial);
      auto p = offload::measure_profile(st, one, loss, model->parameters());
      if (halvings > 0) {
        const double ratio = static_cast<double>(x[0].numel()) / static_cast<double>(one.numel());
        p = p.scaled(ratio);
        std::cerr << "offload: one batch entry at " << x.sizes().slice(2)
                  << " does not fit with everything kept; profiled " << torch::IntArrayRef(spatial)
                  << " and scaled by " << ratio << "\n";
      }
      return p.scaled_to_batch(x.size(0));
    } catch (const c10::OutOfMemoryError&) {
      for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
      c10::cuda::CUDACachingAllocator::emptyCache();
      bool smaller = false;
      for (int64_t d = 2; d < one.dim(); ++d) {
        if (one.size(d) >= 16) {
          one = one.narrow(d, 0, one.size(d) / 2);
          smaller = true;
        }
      }
      if (!smaller) throw;
      one = one.contiguous();
    }
  }
}

// Bytes the caching allocator holds for tensors now (0 without CUDA).
int64_t allocated_now() {
  if (offload::device_total_bytes() == 0) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return static_cast<int64_t>(
      stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
          .current);
}

}  // namespace

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
  if (const char* d = std::getenv("FNO_PLAN_CACHE"); d != nullptr) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d) {
    return std::string(d) + "/fno/plans";
  }
  if (const char* d = std::getenv("HOME"); d != nullptr && *d) {
    return std::string(d) + "/.cache/fno/plans";
  }
  return "";
}

namespace {

// What a plan depends on, as one line: a cached plan is reused only for the same key.
std::string plan_key(const FNO& model, const at::Tensor& x, int64_t budget,
                     const offload::OffloadOptions& o) {
  const auto& m = model->options;
  std::ostringstream k;
  k << "fno-offload-plan v1; model modes=" << torch::IntArrayRef(m.n_modes())
    << " in=" << m.in_channels() << " out=" << m.out_channels() << " hidden=" << m.hidden_channels()
    << " layers=" << m.n_layers() << " lifting=" << model->lifting_channels()
    << " projection=" << model->projection_channels() << " mlp=" << m.channel_mlp_expansion()
    << (m.use_channel_mlp() ? "" : " no-channel-mlp") << (m.single_gelu() ? " single-gelu" : "")
    << " embedding=" << m.positional_embedding() << " padding=[";
  for (double d : m.domain_padding()) k << d << ' ';
  k << (m.domain_padding_mode() == PaddingMode::kOneSided ? "] one-sided" : "]") << "; input "
    << x.sizes() << ' ' << x.scalar_type() << "; compute " << m.compute_dtype()
    << (at::globalContext().allowTF32CuBLAS() ? " tf32" : "") << "; budget "
    << (budget > 0 ? std::to_string(budget) : std::string("free memory")) << "; device ";
  if (x.is_cuda()) {
    k << at::cuda::getDeviceProperties(x.device().index())->name << " ("
      << offload::device_total_bytes() << " B)";
  } else {
    k << x.device();
  }
  k << "; min_bytes=" << o.min_bytes() << " prefetch_depth=" << o.prefetch_depth()
    << " max_inflight=" << o.max_inflight_bytes() << " max_prefetch=" << o.max_prefetch_bytes()
    << " compress=" << offload::to_string(o.compress());
  return k.str();
}

// A file name per key (the key itself is inside the file).
std::string key_file_name(const std::string& key) {
  return "plan-" + c10::sha1(key).str().substr(0, 16) + ".txt";
}

// A plan file: "key: ...", "plan: ...", "peak_bytes: N", "ms: X".
struct PlanRecord {
  std::string key, plan;
  int64_t peak = 0;
  double ms = 0;
  offload::Plan parsed;              // plan, for the stages it was read for
  std::optional<TiledChoice> tiled;  // or plan, when it is a tiled one
};

std::optional<PlanRecord> read_plan_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  PlanRecord r;
  std::string line;
  while (std::getline(f, line)) {
    const auto colon = line.find(": ");
    if (colon == std::string::npos) continue;
    const auto k = line.substr(0, colon), v = line.substr(colon + 2);
    try {
      if (k == "key") r.key = v;
      if (k == "plan") r.plan = v;
      if (k == "peak_bytes") r.peak = std::stoll(v);
      if (k == "ms") r.ms = std::stod(v);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (r.key.empty() || r.plan.empty()) return std::nullopt;
  return r;
}

// Written atomically: a reader never sees half a plan. A plan that cannot be
// kept is only a warning; training goes on.
void write_plan_file(const std::string& path, const PlanRecord& r) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ostringstream text;
  text << "key: " << r.key << "\nplan: " << r.plan << "\npeak_bytes: " << r.peak << "\nms: " << r.ms
       << "\n";
  const std::string bytes = text.str();
  try {
    write_file_atomic(path, bytes.data(), bytes.size());
  } catch (const std::exception& e) {
    std::cerr << "offload auto: warning: the plan is not kept: " << e.what() << "\n";
  }
}

}  // namespace

// One step's input and loss: either loss(out) for the whole batch, or
// loss2(out, y) that adds over batch entries (then micro-batches are possible).
struct StepBatch {
  at::Tensor x, y;
  std::function<at::Tensor(const at::Tensor&)> loss;
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss2;
  bool mean = false;  // loss2 averages over entries (each micro-batch is weighted by its share)
  bool can_split() const { return static_cast<bool>(loss2); }
};

struct OffloadedStep::Impl {
  FNO model{nullptr};
  OffloadSettings settings;
  offload::Policy policy;
  std::unique_ptr<offload::Offloader> offloader;
  std::vector<int64_t> shape;  // of the last planned input
  std::vector<offload::Stage> stages;
  offload::Plan plan;
  std::optional<TiledChoice> tiled;     // auto chose a tiled plan (then `plan` is unused)
  std::unique_ptr<TiledRunner> runner;  // runs tiled plans (trials and steps)
  offload::Profile profile;
  offload::Estimate estimate;
  bool profiled = false;
  offload::StepStats stats;
  bool record_next = false;
  double plan_seconds = 0;  // of the last auto search
  int64_t pinned_seen = 0;  // the pinned pool's largest size seen in a trial
  std::function<void(const std::string&)> before_final_backward;
  std::string plan_key_text;  // shape and plan, for before_final_backward; made once per plan

  void final_backward(const at::Tensor& l, bool notify) {
    if (notify && before_final_backward) {
      if (plan_key_text.empty()) {
        plan_key_text = c10::str(l.device(), " ", shape, " ", plan.to_string(stages),
                                 " micro-batches ", plan.micro_batches);
      }
      before_final_backward(plan_key_text);
    }
    l.backward();
  }

  // Forward and backward of `b` under `run_plan`, micro-batch by micro-batch;
  // the loss (summed over micro-batches), detached.
  // `notify`: a real step (before_final_backward is called), not a trial.
  at::Tensor run(const offload::Plan& run_plan, const StepBatch& b, bool notify = false) {
    std::optional<offload::OffloadGuard> guard;
    if (offloader->active()) guard.emplace(*offloader, offload::Level::kKeep);
    const int64_t k = std::min(run_plan.micro_batches, b.x.size(0));
    if (k <= 1) {
      auto out = offload::run_stages(stages, run_plan, b.x, offloader.get());
      auto l = b.loss2 ? b.loss2(out, b.y) : b.loss(out);
      offloader->mark("loss");
      final_backward(l, notify);
      return l.detach();
    }
    TORCH_CHECK(b.can_split(), "fno: a plan of micro-batches needs a loss over (output, target)");
    const int64_t batch = b.x.size(0);
    at::Tensor total;
    int64_t first = 0;
    const auto sizes = offload::split_sizes(batch, k);
    for (size_t m = 0; m < sizes.size(); ++m) {
      const int64_t n = sizes[m];
      // x: [B, ...] -> [n, ...]; the gradients of the micro-batches add up.
      auto out = offload::run_stages(stages, run_plan, b.x.narrow(0, first, n), offloader.get());
      auto l = b.loss2(out, b.y.narrow(0, first, n));
      if (b.mean) l = l * (static_cast<double>(n) / static_cast<double>(batch));
      offloader->mark("loss");
      if (m + 1 == sizes.size()) {
        final_backward(l, notify);
      } else {
        l.backward();
      }
      total = total.defined() ? total + l.detach() : l.detach();
      first += n;
    }
    return total;
  }

  // One step under `plan` (gradients discarded): host ms and peak bytes. A
  // step that had to grow the pinned pool (cudaHostAlloc: ~0.6 s/GiB) runs again.
  std::pair<double, int64_t> trial(const offload::Plan& trial_plan, const StepBatch& b) {
    for (int attempt = 0;; ++attempt) {
      offloader->begin_step();
      const auto t0 = std::chrono::steady_clock::now();
      run(trial_plan, b);
      if (b.x.is_cuda()) torch::cuda::synchronize();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const auto st = offloader->end_step();
      for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
      const bool grew = st.host_pinned_bytes > pinned_seen;
      pinned_seen = std::max(pinned_seen, st.host_pinned_bytes);
      if (!grew || attempt > 0) return {ms, st.peak_allocated};
    }
  }

  // One step of a tiled plan, as trial() does for the whole-grid ones.
  std::pair<double, int64_t> trial_tiled(const TiledChoice& choice, const StepBatch& b) {
    for (int attempt = 0;; ++attempt) {
      offloader->begin_step();
      const auto t0 = std::chrono::steady_clock::now();
      tiled_runner().step(choice, b.x, b.y, b.loss2, b.mean);
      if (b.x.is_cuda()) torch::cuda::synchronize();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const auto st = offloader->end_step();
      for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
      const bool grew = st.host_pinned_bytes > pinned_seen;
      pinned_seen = std::max(pinned_seen, st.host_pinned_bytes);
      if (!grew || attempt > 0) return {ms, st.peak_allocated};
    }
  }
  template <typename C>
  std::pair<double, int64_t> trial(const C& c, const StepBatch& b) {
    return c.tiled ? trial_tiled(*c.tiled, b) : trial(*c.whole, b);
  }

  // A plan read from a file, when it holds this key and names these stages.
  std::optional<PlanRecord> cached(const std::string& path, const std::string& key) const {
    if (path.empty()) return std::nullopt;
    auto r = read_plan_file(path);
    if (!r || r->key != key) return std::nullopt;
    try {
      if (is_tiled_plan_text(r->plan)) {
        r->tiled = parse_tiled_choice(r->plan);
      } else {
        r->parsed = offload::parse_plan(r->plan, stages);
      }
    } catch (const std::invalid_argument&) {
      return std::nullopt;
    }
    return r;
  }

  void make_plan(const StepBatch& b) {
    const auto& x = b.x;
    shape = x.sizes().vec();
    plan_key_text.clear();
    tiled.reset();
    stages = fno_stages(model, x.sizes().slice(2).vec());
    if (policy.kind != offload::Policy::Kind::kAuto) {
      plan = offload::plan_for_policy(policy, stages, std::min(settings.chunks, x.size(0)));
      plan.micro_batches = b.can_split() ? settings.micro_batches : 1;
      return;
    }
    const int64_t budget = resolve_gpu_budget(settings.gpu_memory_limit);
    const auto key =
        // The budget as asked for: 0 (the free memory) stays 0, so that --resume
        // and later runs find the plan although the free memory moves a little.
        plan_key(model, x, settings.gpu_memory_limit, settings.options) +
        (b.can_split() ? "; micro-batches" : "");
    const std::string cache_path = settings.plan_cache_dir.empty()
                                       ? std::string()
                                       : settings.plan_cache_dir + "/" + key_file_name(key);
    for (const auto& path : {settings.plan_file, cache_path}) {
      // A cached plan whose measured peak exceeds today's budget is searched again.
      if (auto r = cached(path, key); r && r->peak <= budget) {
        plan = r->parsed;
        tiled = r->tiled;
        profiled = true;
        estimate = {};
        estimate.peak_bytes = r->peak;
        estimate.step_ms = r->ms;
        plan_seconds = 0;
        std::cerr << "offload auto: budget " << offload::format_bytes(budget) << ", plan "
                  << plan_text_only() << " from " << path << " (measured peak "
                  << offload::format_bytes(r->peak) << ", " << r->ms << " ms/step)\n";
        if (path != settings.plan_file && !settings.plan_file.empty()) {
          write_plan_file(settings.plan_file, *r);
        }
        return;
      }
    }
    const auto t_search = std::chrono::steady_clock::now();
    search(b, budget);
    plan_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_search).count();
    std::cerr << "offload auto: budget " << offload::format_bytes(budget) << ", plan "
              << plan_text_only() << "; measured peak "
              << offload::format_bytes(estimate.peak_bytes) << ", " << estimate.step_ms
              << " ms/step; search " << plan_seconds << " s\n";
    const PlanRecord record{key, plan_text_only(), estimate.peak_bytes, estimate.step_ms, {}, {}};
    for (const auto& path : {settings.plan_file, cache_path}) {
      if (!path.empty()) write_plan_file(path, record);
    }
  }

  // A plan auto may take: offload/'s per-stage plan of the whole grid, or a
  // tiled one (fno_engine/tiled_plan.h); the model's estimate ranks them.
  struct Candidate {
    std::optional<offload::Plan> whole;
    std::optional<TiledChoice> tiled;
    offload::Estimate estimate;
    double score = 0;
    std::string text;
  };
  struct Measured {
    size_t i;
    double ms;
    int64_t peak;
  };

  // Profile one batch entry with everything kept, scale it to the batch, rank
  // plans by the model (offload/planner.h), and measure a few on the real
  // batch; when those do not fit, or pay much for their fit, tiled plans too.
  // The fastest measured within the budget wins. The models rank; only
  // measurements decide, and a plan over budget is never taken.
  void search(const StepBatch& b, int64_t budget) {
    // A margin for step-to-step variation of the peak (allocator state, copy timing).
    const auto limit = static_cast<int64_t>(static_cast<double>(budget) * (1.0 - kMargin));
    auto candidates = whole_grid_candidates(b, budget);
    std::vector<Measured> fitting;
    Least least;
    measure(candidates, 0, b, limit, fitting, least);
    double best = std::numeric_limits<double>::infinity();
    for (const auto& m : fitting) best = std::min(best, m.ms);
    // The plain step's estimate: plans much slower than it leave room for tiles.
    const double plain =
        profiled ? offload::estimate(profile, plan_for_policy(offload::Policy{}, stages),
                                     settings.options)
                       .step_ms
                 : 0;
    if (fitting.empty() || best > kTileAbove * plain) {
      const size_t first = candidates.size();
      std::string refusal;
      for (auto& c : tiled_family(b, budget, refusal)) candidates.push_back(std::move(c));
      measure(candidates, first, b, limit, fitting, least);
      if (fitting.empty() && !refusal.empty()) throw offload::BudgetError(refusal);
    }
    if (fitting.empty()) {
      const bool tried = !candidates.empty();
      throw offload::BudgetError(
          "offload auto: no plan keeps a step of batch " + c10::str(b.x.sizes()) + " within " +
          offload::format_bytes(budget) +
          (least.text.empty() ? std::string(tried ? ": every trial ran out of memory"
                                                  : ": no plan is estimated to fit")
                              : ": the least peak measured is " +
                                    offload::format_bytes(least.peak) + " (" + least.text + ")") +
          tile_floor(b) +
          "; raise the budget (--gpu-memory-limit), or lower data.batch_size or the grid");
    }
    choose(candidates, fitting, b, budget, limit);
  }

  struct Least {
    int64_t peak = std::numeric_limits<int64_t>::max();
    std::string text;
  };

  // The whole-grid plans worth measuring (none when one batch entry, even
  // profiled on a coarser grid, does not fit).
  std::vector<Candidate> whole_grid_candidates(const StepBatch& b, int64_t budget) {
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

  // The tiled plans worth measuring (fno_engine/tiled_plan.h). When some fit
  // the GPU budget but none the pinned host memory, `refusal` says so.
  std::vector<Candidate> tiled_family(const StepBatch& b, int64_t budget, std::string& refusal) {
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

  // "; tiles need at least X (estimated)", when the model runs tiled.
  std::string tile_floor(const StepBatch& b) const {
    if (!tiled_unsupported(model).empty() || b.x.dim() < 4) return "";
    const auto least = least_memory_tiled(model, b.x.sizes(), tiled_context(b));
    return "; in spatial tiles a step needs at least " + offload::format_bytes(least.peak_bytes) +
           " (estimated)";
  }

  // What a tiled plan's estimate takes from outside the step.
  TiledContext tiled_context(const StepBatch& b) const {
    TiledContext c;
    c.base_bytes = allocated_now();
    for (const auto& p : model->parameters()) c.grad_bytes += static_cast<int64_t>(p.nbytes());
    c.window = settings.options.max_inflight_bytes();
    c.compress = settings.options.compress() == offload::Compress::kBF16 &&
                 model->options.compute_dtype() == torch::kFloat;
    c.can_split = b.can_split();
    return c;
  }

  TiledRunner& tiled_runner() {
    if (!runner) runner = std::make_unique<TiledRunner>(model, offloader.get());
    return *runner;
  }

  // Measures candidates[first..]: until a fitting plan is found and the rest
  // are estimated much slower than it, both against its measured time and
  // against its own estimate (the models overestimate tiled steps by up to a
  // third: against the measured time alone, whether a plan estimated a little
  // faster is measured at all would hang on the first trial's noise).
  void measure(std::vector<Candidate>& candidates, size_t first, const StepBatch& b, int64_t limit,
               std::vector<Measured>& fitting, Least& least) {
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
      const auto& c = candidates[i];
      if (!fitting.empty() && c.score > kSkipAbove * best_ms && c.score > kSkipAbove * best_score) {
        continue;
      }
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
      if (status != "ok") continue;
      if (peak < least.peak) least = {peak, c.text};
      if (peak <= limit) {
        fitting.push_back({i, ms, peak});
        note_best(fitting.back());
      }
    }
  }

  // The two fastest fitting plans once more (one step each is noisy); the
  // larger of the two peaks seen counts.
  void choose(const std::vector<Candidate>& candidates, std::vector<Measured> fitting,
              const StepBatch& b, int64_t budget, int64_t limit) {
    std::sort(fitting.begin(), fitting.end(),
              [](const Measured& x, const Measured& y) { return x.ms < y.ms; });
    if (fitting.size() > 2) fitting.resize(2);
    if (fitting.size() == 2) {
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

  at::Tensor step(const StepBatch& b) {
    const bool none = policy.kind == offload::Policy::Kind::kNone;
    const bool micro = settings.micro_batches > 1 && b.can_split();
    if (!offloader || (none && !record_next && !micro)) {
      auto out = model->forward(b.x);
      auto l = b.loss2 ? b.loss2(out, b.y) : b.loss(out);
      if (before_final_backward)
        before_final_backward(c10::str(l.device(), " ", b.x.sizes(), " plain"));
      l.backward();
      return l.detach();
    }
    if (b.x.sizes().vec() != shape) make_plan(b);
    if (!offloader->active()) return run(plan, b, true);  // no CUDA: micro-batches only
    if (record_next) offloader->set_record_timeline(true);
    offloader->begin_step();
    // The loss and anything outside the stages keep their tensors; each
    // stage's scope sets its own level. A tiled plan runs its own sweeps.
    at::Tensor l;
    if (tiled) {
      l = tiled_runner().step(*tiled, b.x, b.y, b.loss2, b.mean, [&] {
        if (before_final_backward) before_final_backward(plan_key_for_tiled(b));
      });
    } else {
      l = run(plan, b, true);
    }
    stats = offloader->end_step();
    if (record_next) {
      offloader->set_record_timeline(false);
      record_next = false;
    }
    return l;
  }

  std::string plan_key_for_tiled(const StepBatch& b) {
    if (plan_key_text.empty()) {
      plan_key_text = c10::str(b.x.device(), " ", shape, " ", tiled->to_string());
    }
    return plan_key_text;
  }

  // The plan as its files write it: the tiled choice, or the stages' plan.
  std::string plan_text_only() const { return tiled ? tiled->to_string() : plan.to_string(stages); }

  static constexpr size_t kRanked = 6;
  static constexpr size_t kTiledRanked = 3;  // tiled plans measured
  // Tiled plans are measured when the best whole-grid plan that fits is
  // slower than this times the plain step's estimate (or none fits).
  static constexpr double kTileAbove = 1.2;
  static constexpr double kTileSlack = 1.3;   // larger tiles measured up to this x the budget
  static constexpr double kMargin = 0.02;     // of the budget
  static constexpr double kSkipAbove = 1.25;  // estimated ms over the best measured
};

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
  return p_->policy.kind == offload::Policy::Kind::kNone && p_->settings.micro_batches == 1;
}

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
  auto l = loss([&p](const at::Tensor& in) { return p.model->forward(in); }, x, y);
  if (p.before_final_backward) {
    p.before_final_backward(c10::str(l.device(), " ", x.sizes(), " composite"));
  }
  l.backward();
  return l.detach();
}

at::Tensor OffloadedStep::forward(const at::Tensor& x) {
  auto& p = *p_;
  torch::NoGradGuard no_grad;
  if (p.tiled) return p.tiled_runner().forward(*p.tiled, x);
  int64_t per = x.size(0);
  if (!p.shape.empty() && p.policy.kind != offload::Policy::Kind::kNone) {
    const int64_t k = p.policy.kind == offload::Policy::Kind::kAuto ? p.plan.micro_batches
                                                                    : p.settings.micro_batches;
    per = std::max<int64_t>(1, (p.shape[0] + k - 1) / std::max<int64_t>(k, 1));
  }
  if (per >= x.size(0)) return p.model->forward(x);
  std::vector<at::Tensor> outs;
  for (int64_t first = 0; first < x.size(0); first += per) {
    outs.push_back(p.model->forward(x.narrow(0, first, std::min(per, x.size(0) - first))));
  }
  return torch::cat(outs, 0);
}

std::string OffloadedStep::plan_text() const {
  if (p_->policy.kind == offload::Policy::Kind::kNone) return "none";
  std::ostringstream o;
  o << p_->plan_text_only();
  if (p_->profiled) {
    o << " (auto: measured peak " << offload::format_bytes(p_->estimate.peak_bytes) << ", "
      << p_->estimate.step_ms << " ms/step)";
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
