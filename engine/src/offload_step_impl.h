// Internal to engine/: OffloadedStep's state and its steps (offload_step.cpp),
// auto's plan search (auto_search.cpp), and the helpers both use.
#pragma once

#include <fno_engine/offload_step.h>
#include <fno_engine/search_cap.h>

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
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace fno {
namespace detail {

// The per-stage profile of one batch entry of x (everything kept), scaled to
// x's batch. When one entry does not fit with everything kept (the profile
// keeps all, whatever the plan will be), a coarser grid is measured, halving
// each spatial dim until it fits, and scaled up by the number of grid points:
// activations grow with them, and so, closely, does the time.
inline offload::Profile profile_batch(FNO& model, const std::vector<offload::Stage>& stages,
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
inline int64_t allocated_now() {
  if (offload::device_total_bytes() == 0) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return static_cast<int64_t>(
      stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
          .current);
}

// What a plan depends on, as one line: a cached plan is reused only for the same key.
inline std::string plan_key(const FNO& model, const at::Tensor& x, int64_t budget,
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
inline std::string key_file_name(const std::string& key) {
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

inline std::optional<PlanRecord> read_plan_file(const std::string& path) {
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
inline void write_plan_file(const std::string& path, const PlanRecord& r) {
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

// One step's input and loss: either loss(out) for the whole batch, or
// loss2(out, y) that adds over batch entries (then micro-batches are possible).
struct StepBatch {
  at::Tensor x, y;
  std::function<at::Tensor(const at::Tensor&)> loss;
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss2;
  bool mean = false;  // loss2 averages over entries (each micro-batch is weighted by its share)
  bool can_split() const { return static_cast<bool>(loss2); }
};

}  // namespace detail

using namespace detail;  // (internal to engine/: this header is included by its two .cpp files
                         // only)

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
  double plan_seconds = 0;      // of the last auto search
  std::string search_note;      // the last search was cut: search_cut_note's words ("": it was not)
  bool estimated_only = false;  // ... and took a plan it did not measure (estimate is estimated)
  int64_t pinned_seen = 0;      // the pinned pool's largest size seen in a trial
  std::function<void(const std::string&)> before_final_backward;
  std::string plan_key_text;  // shape and plan, for before_final_backward; made once per plan
  Band band;  // set_band: this rank's rows of each sample (one process: the whole grid)
  // A split band's plan is the whole band with activations kept (TiledRunner::
  // step_whole; then `tiled` is unset), else `tiled`.
  bool whole_band = false;
  std::string band_plan_said;  // the band's auto plan last written to stderr
  // forward_plan's plans for inputs off the training plan's grid, per shape.
  std::map<std::vector<int64_t>, ForwardPlan> forward_plans;

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
  std::pair<double, int64_t> measured_step(const StepBatch& b, const std::function<void()>& step) {
    for (int attempt = 0;; ++attempt) {
      offloader->begin_step();
      const auto t0 = std::chrono::steady_clock::now();
      step();
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
  // A whole-grid plan's trial, and a tiled plan's.
  std::pair<double, int64_t> trial(const offload::Plan& trial_plan, const StepBatch& b) {
    return measured_step(b, [&] { run(trial_plan, b); });
  }
  std::pair<double, int64_t> trial_tiled(const TiledChoice& choice, const StepBatch& b) {
    return measured_step(b, [&] { tiled_runner().step(choice, b.x, b.y, b.loss2, b.mean); });
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
        search_note.clear();
        estimated_only = false;
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
              << plan_text_only() << (estimated_only ? "; estimated peak " : "; measured peak ")
              << offload::format_bytes(estimate.peak_bytes) << ", " << estimate.step_ms
              << " ms/step; search " << plan_seconds << " s"
              << (search_note.empty() ? "" : " (" + search_note + ")") << "\n";
    // A plan never measured is kept nowhere; one of a cut search only in the
    // run's own file (--resume), not in the cache: a later run searches again.
    if (estimated_only) return;
    const PlanRecord record{key, plan_text_only(), estimate.peak_bytes, estimate.step_ms, {}, {}};
    for (const auto& path : {settings.plan_file, search_note.empty() ? cache_path : ""}) {
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
    bool failed = false;  // its trial ran out of memory or peaked over the limit
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
  void search(const StepBatch& b, int64_t budget);

  struct Least {
    int64_t peak = std::numeric_limits<int64_t>::max();
    std::string text;
  };

  // The search's clock (settings.search_seconds) and its trials so far.
  struct Progress {
    SearchCap cap;
    int64_t trials = 0;  // candidates measured (or tried: out of memory)
    bool cut = false;    // the cap kept a trial from starting
    // Whether another trial, expected to take `seconds`, may start. One that
    // would end past the cap does not (the search is cut), but a shorter one
    // after it still may, until the cap has passed (over()).
    bool next(double seconds = 0) {
      if (cap.expired(seconds)) cut = true;
      return !cap.expired(seconds);
    }
    bool over() const { return cap.expired(); }
  };

  // The whole-grid plans worth measuring (none when one batch entry, even
  // profiled on a coarser grid, does not fit).
  std::vector<Candidate> whole_grid_candidates(const StepBatch& b, int64_t budget);

  // The tiled plans worth measuring (fno_engine/tiled_plan.h). When some fit
  // the GPU budget but none the pinned host memory, `refusal` says so.
  std::vector<Candidate> tiled_family(const StepBatch& b, int64_t budget, std::string& refusal);

  // "; tiles need at least X (estimated)", when the model runs tiled.
  std::string tile_floor(const StepBatch& b) const;

  // What a tiled plan's estimate takes from outside the step.
  TiledContext tiled_context(const StepBatch& b) const;

  TiledRunner& tiled_runner() {
    if (!runner) {
      runner = std::make_unique<TiledRunner>(model, offloader.get());
      runner->set_band(band);
    }
    return *runner;
  }

  // Measures candidates[first..]: until a fitting plan is found and the rest
  // are estimated much slower than it, both against its measured time and
  // against its own estimate (the models overestimate tiled steps by up to a
  // third: against the measured time alone, whether a plan estimated a little
  // faster is measured at all would hang on the first trial's noise).
  // Once the cap has passed (progress.next()), no further trial starts.
  void measure(std::vector<Candidate>& candidates, size_t first, const StepBatch& b, int64_t limit,
               std::vector<Measured>& fitting, Least& least, Progress& progress);

  // The two fastest fitting plans once more (one step each is noisy; not
  // after the cap); the larger of the two peaks seen counts.
  void choose(const std::vector<Candidate>& candidates, std::vector<Measured> fitting,
              const StepBatch& b, int64_t budget, int64_t limit, Progress& progress);

  // A cut search that measured no plan within the budget: the fastest
  // estimated to fit, not failed in a trial (false: there is none).
  bool take_estimated(const std::vector<Candidate>& candidates, int64_t limit,
                      const Progress& progress);

  // A split band's plan for b (set_band): the whole band with activations
  // kept, or a tiled plan, the same on every rank of the sample
  // (offload_step.cpp).
  void make_band_plan(const StepBatch& b);
  // Whether the whole band of b (rank 0's: band 0, the largest) is estimated
  // to fit `budget` with every activation kept (offload_step.cpp).
  bool whole_band_fits(const StepBatch& b, int64_t budget);
  at::Tensor band_step(const StepBatch& b) {
    TORCH_CHECK(b.can_split(),
                "offload: a step split across ranks needs a loss over (output, target)");
    if (b.x.sizes().vec() != shape) make_band_plan(b);
    const bool moves = offloader && offloader->active();
    if (moves) {
      if (record_next) offloader->set_record_timeline(true);
      offloader->begin_step();
    }
    const auto before_last = [&] {
      if (before_final_backward) before_final_backward(plan_key_for_tiled(b));
    };
    auto l = whole_band ? tiled_runner().step_whole(b.x, b.y, b.loss2, b.mean,
                                                    settings.micro_batches, before_last)
                        : tiled_runner().step(*tiled, b.x, b.y, b.loss2, b.mean, before_last);
    if (moves) {
      stats = offloader->end_step();
      if (record_next) offloader->set_record_timeline(false);
    }
    record_next = false;
    return l;
  }

  at::Tensor step(const StepBatch& b) {
    if (band.split()) return band_step(b);
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
      plan_key_text = c10::str(b.x.device(), " ", shape, " ", plan_text_only());
    }
    return plan_key_text;
  }

  // The plan as its files write it: the whole band, the tiled choice, or the stages' plan.
  std::string plan_text_only() const {
    if (band.split() && whole_band && !shape.empty()) {
      return "this rank's band of " + std::to_string(shape[2]) + " rows, activations kept";
    }
    return tiled ? tiled->to_string() : plan.to_string(stages);
  }

  static constexpr size_t kRanked = 6;
  static constexpr size_t kTiledRanked = 3;  // tiled plans measured
  // Tiled plans are measured when the best whole-grid plan that fits is
  // slower than this times the plain step's estimate (or none fits).
  static constexpr double kTileAbove = 1.2;
  static constexpr double kTileSlack = 1.3;         // larger tiles measured up to this x the budget
  static constexpr double kMargin = 0.02;           // of the budget
  static constexpr double kSkipAbove = 1.25;        // estimated ms over the best measured
  static constexpr double kPinSecondsPerGiB = 0.6;  // growing the pinned pool (cudaHostAlloc)
};

}  // namespace fno
