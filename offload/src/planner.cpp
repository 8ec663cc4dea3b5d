// Policies, the per-stage profile, the memory/time estimate and the budget planner.
#include <fno_offload/planner.h>

#include "copy_engine.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

namespace fno::offload {

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------
std::string to_string(Policy::Kind kind, int64_t blocks) {
  switch (kind) {
    case Policy::Kind::kNone:
      return "none";
    case Policy::Kind::kAll:
      return "all";
    case Policy::Kind::kBlocks:
      return "blocks:" + std::to_string(blocks);
    case Policy::Kind::kRecompute:
      return "recompute";
    case Policy::Kind::kRecomputeOffload:
      return "recompute+offload";
    case Policy::Kind::kSlim:
      return "slim";
    case Policy::Kind::kAuto:
      return "auto";
  }
  return "?";
}

Policy Policy::of(Kind kind, int64_t blocks) {
  Policy p;
  p.kind = kind;
  p.blocks = kind == Kind::kBlocks ? blocks : 0;
  p.text = to_string(kind, p.blocks);
  return p;
}

Policy parse_policy(const std::string& text) {
  Policy p;
  p.text = text;
  if (text == "none") {
    p.kind = Policy::Kind::kNone;
  } else if (text == "all") {
    p.kind = Policy::Kind::kAll;
  } else if (text == "recompute") {
    p.kind = Policy::Kind::kRecompute;
  } else if (text == "recompute+offload") {
    p.kind = Policy::Kind::kRecomputeOffload;
  } else if (text == "slim") {
    p.kind = Policy::Kind::kSlim;
  } else if (text == "auto") {
    p.kind = Policy::Kind::kAuto;
  } else if (text.rfind("blocks:", 0) == 0) {
    const auto k = text.substr(7);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(k, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (k.empty() || used != k.size() || v < 0) {
      throw std::invalid_argument("offload policy '" + text +
                                  "': K in blocks:K must be an integer >= 0");
    }
    p.kind = Policy::Kind::kBlocks;
    p.blocks = v;
  } else {
    throw std::invalid_argument("unknown offload policy '" + text +
                                "' (expected none, slim, all, blocks:K, recompute, "
                                "recompute+offload or auto)");
  }
  return p;
}

int64_t parse_bytes(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("bad memory size '" + text + "': " + why +
                                 " (examples: 16GiB, 8GB, 512MiB, 1.5e9)");
  };
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad("no number");
  }
  std::string unit = text.substr(used);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  std::string lower;
  for (char c : unit)
    lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  double scale = 0;
  if (lower.empty() || lower == "b")
    scale = 1;
  else if (lower == "kb")
    scale = 1e3;
  else if (lower == "mb")
    scale = 1e6;
  else if (lower == "gb")
    scale = 1e9;
  else if (lower == "tb")
    scale = 1e12;
  else if (lower == "kib" || lower == "k")
    scale = 1024.0;
  else if (lower == "mib" || lower == "m")
    scale = 1024.0 * 1024;
  else if (lower == "gib" || lower == "g")
    scale = 1024.0 * 1024 * 1024;
  else if (lower == "tib" || lower == "t")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    throw bad("unknown unit '" + unit + "'");
  const double bytes = value * scale;
  if (!(bytes > 0)) throw bad("must be > 0");
  if (!std::isfinite(bytes) || bytes > 9.0e18) throw bad("must be at most 9e18 bytes (8 EiB)");
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (std::abs(b) >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  } else if (std::abs(b) >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  } else {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

Plan plan_for_policy(const Policy& policy, const std::vector<Stage>& stages, int64_t chunks) {
  TORCH_CHECK(policy.kind != Policy::Kind::kAuto,
              "fno offload: 'auto' needs a profile and a budget (plan_for_budget)");
  TORCH_CHECK(chunks >= 1, "fno offload: chunks must be >= 1, got ", chunks);
  Plan plan;
  for (size_t i = 0; i < stages.size(); ++i) {
    StagePlan sp;
    switch (policy.kind) {
      case Policy::Kind::kNone:
        sp.level = Level::kKeep;
        break;
      case Policy::Kind::kAll:
        sp.level = Level::kOffload;
        break;
      case Policy::Kind::kBlocks:
        sp.level = static_cast<int64_t>(i) < policy.blocks ? Level::kOffload : Level::kKeep;
        break;
      case Policy::Kind::kRecompute:
        sp.level = Level::kRecompute;
        break;
      case Policy::Kind::kRecomputeOffload:
        sp.level = Level::kRecomputeOffload;
        break;
      case Policy::Kind::kSlim:
        sp.level = Level::kSlim;
        break;
      case Policy::Kind::kAuto:
        break;
    }
    sp.chunks = stages[i].chunkable ? chunks : 1;
    plan.stages.push_back(sp);
  }
  return plan;
}

Plan parse_plan(const std::string& text, const std::vector<Stage>& stages) {
  Plan plan;
  std::string body = text;
  if (body.rfind("micro_batches=", 0) == 0) {
    const auto semi = body.find(';');
    const auto k = body.substr(14, semi == std::string::npos ? std::string::npos : semi - 14);
    if (semi == std::string::npos || k.empty() || k.size() > 6 ||
        k.find_first_not_of("0123456789") != std::string::npos || std::stoll(k) < 1) {
      throw std::invalid_argument("offload plan '" + text + "': bad micro_batches '" + k + "'");
    }
    plan.micro_batches = std::stoll(k);
    body = body.substr(semi + 1);
  }
  std::istringstream in(body);
  std::string item;
  size_t i = 0;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    const auto bad = [&](const std::string& why) {
      return std::invalid_argument("offload plan '" + text + "': " + why);
    };
    if (i >= stages.size())
      throw bad("more entries than the " + std::to_string(stages.size()) + " stages");
    const auto eq = item.find('=');
    if (eq == std::string::npos || item.substr(0, eq) != stages[i].name) {
      throw bad("entry " + std::to_string(i) + " ('" + item + "') is not stage " + stages[i].name);
    }
    std::string level = item.substr(eq + 1);
    StagePlan sp;
    if (const auto slash = level.find('/'); slash != std::string::npos) {
      const auto c = level.substr(slash + 1);
      if (c.empty() || c.find_first_not_of("0123456789") != std::string::npos || c.size() > 6) {
        throw bad("bad chunk count '" + c + "' for " + stages[i].name);
      }
      sp.chunks = std::stoll(c);
      level = level.substr(0, slash);
    }
    bool known = false;
    for (auto l : {Level::kKeep, Level::kOffload, Level::kRecompute, Level::kRecomputeOffload,
                   Level::kSlim}) {
      if (to_string(l) == level) {
        sp.level = l;
        known = true;
      }
    }
    if (!known) throw bad("unknown level '" + level + "' for " + stages[i].name);
    if (sp.chunks < 1 || (sp.chunks > 1 && !stages[i].chunkable)) {
      throw bad(stages[i].name + " cannot run in " + std::to_string(sp.chunks) + " chunks");
    }
    plan.stages.push_back(sp);
    ++i;
  }
  if (i != stages.size()) {
    throw std::invalid_argument("offload plan '" + text + "': " + std::to_string(i) +
                                " entries for " + std::to_string(stages.size()) + " stages");
  }
  return plan;
}

// ---------------------------------------------------------------------------
// Profile
// ---------------------------------------------------------------------------
Profile Profile::scaled_to_batch(int64_t b) const {
  TORCH_CHECK(b >= 1, "fno offload: batch must be >= 1, got ", b);
  Profile p = scaled(static_cast<double>(b) / static_cast<double>(batch));
  p.batch = b;
  return p;
}

Profile Profile::scaled(double f) const {
  TORCH_CHECK(f > 0, "fno offload: a profile scale must be > 0, got ", f);
  Profile p = *this;
  const auto scale = [f](int64_t v) {
    return static_cast<int64_t>(std::llround(static_cast<double>(v) * f));
  };
  for (auto& s : p.stages) {
    s.input_bytes = scale(s.input_bytes);
    s.output_bytes = scale(s.output_bytes);
    s.saved_bytes = scale(s.saved_bytes);
    s.forward_transient = scale(s.forward_transient);
    s.backward_transient = scale(s.backward_transient);
    s.forward_ms *= f;
    s.backward_ms *= f;
    s.saved_bytes_slim = scale(s.saved_bytes_slim);
    s.forward_transient_slim = scale(s.forward_transient_slim);
    s.backward_transient_slim = scale(s.backward_transient_slim);
    s.forward_ms_slim *= f;
    s.backward_ms_slim *= f;
  }
  return p;
}

std::string Profile::table() const {
  std::ostringstream o;
  constexpr double kMiB = 1024.0 * 1024;
  o << "activation table (batch " << batch << ", MiB / ms; slim: the stage's fn_slim):\n"
    << "  stage            input   output    saved  fwd-peak  bwd-peak   fwd-ms   bwd-ms"
       "   | slim: saved  fwd-peak  bwd-peak   fwd-ms   bwd-ms\n";
  for (const auto& s : stages) {
    char line[320];
    std::snprintf(line, sizeof line, "  %-14s %7.0f  %7.0f  %7.0f  %8.0f  %8.0f  %7.2f  %7.2f",
                  s.name.c_str(), s.input_bytes / kMiB, s.output_bytes / kMiB, s.saved_bytes / kMiB,
                  s.forward_transient / kMiB, s.backward_transient / kMiB, s.forward_ms,
                  s.backward_ms);
    o << line;
    if (s.has_slim) {
      std::snprintf(line, sizeof line, "   |     %7.0f  %8.0f  %8.0f  %7.2f  %7.2f",
                    s.saved_bytes_slim / kMiB, s.forward_transient_slim / kMiB,
                    s.backward_transient_slim / kMiB, s.forward_ms_slim, s.backward_ms_slim);
      o << line;
    }
    o << "\n";
  }
  o << "  base " << format_bytes(base_bytes) << ", parameter gradients " << format_bytes(grad_bytes)
    << ", copy bandwidth assumed " << d2h_gbps << " / " << h2d_gbps << " GB/s";
  return o.str();
}

namespace {

// One step of `stages`' fn, everything kept, measured stage by stage.
Profile measure_pass(const std::vector<Stage>& stages, const at::Tensor& x,
                     const std::function<at::Tensor(const at::Tensor&)>& loss,
                     const std::vector<at::Tensor>& parameters) {
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  Profile p;
  p.batch = x.size(0);
  for (const auto& t : parameters) p.grad_bytes += static_cast<int64_t>(t.nbytes());
  for (const auto& s : stages) p.stages.push_back({s.name, s.chunkable});

  // Warm-up: cuFFT plans and cuBLAS workspaces are made on first use.
  {
    at::Tensor w = x;
    for (const auto& s : stages) w = s.fn(w);
    loss(w).backward();
    for (const auto& t : parameters) {
      if (t.grad().defined()) t.mutable_grad() = at::Tensor();
    }
  }
  detail::device_synchronize();
  const auto bytes_of = [](const at::Tensor& t) { return static_cast<int64_t>(t.nbytes()); };
  at::Tensor h = x;
  p.base_bytes = detail::allocator_stats().allocated - bytes_of(x);
  // Backward boundaries: the hook on stage s's output fires as its backward
  // begins, which is where stage s+1's backward ends.
  struct Mark {
    Clock::time_point t;
    int64_t allocated = 0;
    bool set = false;
  };
  std::vector<Mark> marks(stages.size());
  std::vector<int64_t> window_peak(stages.size(), 0);
  for (size_t s = 0; s < stages.size(); ++s) {
    auto& sp = p.stages[s];
    sp.input_bytes = bytes_of(h);
    detail::device_synchronize();
    detail::reset_peak_stats();
    const auto a0 = detail::allocator_stats().allocated;
    const auto t0 = Clock::now();
    at::Tensor y = stages[s].fn(h);
    detail::device_synchronize();
    const auto t1 = Clock::now();
    const auto st = detail::allocator_stats();
    sp.output_bytes = bytes_of(y);
    sp.forward_ms = ms(t0, t1);
    sp.forward_transient = st.peak_allocated - a0;
    const int64_t retained = st.allocated - a0 - sp.output_bytes;
    h = at::Tensor();
    const int64_t input_freed = st.allocated - detail::allocator_stats().allocated;
    // The stage saved its input when dropping our reference freed nothing.
    sp.saved_bytes = std::max<int64_t>(0, retained) + (input_freed == 0 ? sp.input_bytes : 0);
    if (y.requires_grad()) {
      y.register_hook([&marks, &window_peak, s, n = stages.size()](const at::Tensor&) {
        detail::device_synchronize();
        const auto a = detail::allocator_stats();
        for (size_t k = s + 1; k < n; ++k) {
          if (marks[k].set) {  // the nearest later stage that has a boundary
            window_peak[k] = a.peak_allocated;
            break;
          }
        }
        marks[s] = {Clock::now(), a.allocated, true};
        detail::reset_peak_stats();
      });
    }
    h = y;
  }
  auto l = loss(h);
  h = at::Tensor();
  detail::device_synchronize();
  l.backward();
  detail::device_synchronize();
  const auto end = Clock::now();
  const auto end_stats = detail::allocator_stats();
  for (size_t s = 0; s < stages.size(); ++s) {
    if (!marks[s].set) continue;
    // Stage s's backward runs from its mark to the nearest earlier mark (or the end).
    size_t k = s;
    while (k > 0 && !marks[k - 1].set) --k;
    const bool last = k == 0;
    p.stages[s].backward_ms = ms(marks[s].t, last ? end : marks[k - 1].t);
    const int64_t peak = last ? end_stats.peak_allocated : window_peak[s];
    p.stages[s].backward_transient = std::max<int64_t>(0, peak - marks[s].allocated);
  }
  for (const auto& t : parameters) {
    if (t.grad().defined()) t.mutable_grad() = at::Tensor();
  }
  return p;
}

}  // namespace

Profile measure_profile(const std::vector<Stage>& stages, const at::Tensor& x,
                        const std::function<at::Tensor(const at::Tensor&)>& loss,
                        const std::vector<at::Tensor>& parameters) {
  TORCH_CHECK(detail::cuda_available() && x.is_cuda(),
              "fno offload: measure_profile needs a CUDA input (the allocator's statistics)");
  Profile p = measure_pass(stages, x, loss, parameters);
  // The slim variants, where stages have them: a second pass running fn_slim.
  std::vector<Stage> slim = stages;
  bool any = false;
  for (auto& s : slim) {
    if (s.fn_slim) {
      s.fn = s.fn_slim;
      any = true;
    }
  }
  if (!any) return p;
  const Profile q = measure_pass(slim, x, loss, parameters);
  for (size_t i = 0; i < stages.size(); ++i) {
    if (!stages[i].fn_slim) continue;
    auto& s = p.stages[i];
    const auto& t = q.stages[i];
    s.has_slim = true;
    s.saved_bytes_slim = t.saved_bytes;
    s.forward_transient_slim = t.forward_transient;
    s.backward_transient_slim = t.backward_transient;
    s.forward_ms_slim = t.forward_ms;
    s.backward_ms_slim = t.backward_ms;
  }
  return p;
}

// ---------------------------------------------------------------------------
// Estimate
// ---------------------------------------------------------------------------
namespace {

struct StageCost {
  int64_t fwd_peak_extra;  // forward transient under this level/chunks
  int64_t bwd_peak_extra;
  int64_t held;       // kept on the GPU until its backward
  int64_t offloaded;  // moved to the host
  int64_t restored;   // on the GPU during its own backward, beyond `held`
  double fwd_ms, bwd_ms;
};

StageCost stage_cost(const StageProfile& full, const StagePlan& sp, const OffloadOptions& o) {
  StageCost c{};
  // Every level but kKeep runs the slim variant, when the stage has one.
  struct {
    int64_t input_bytes, output_bytes, saved_bytes, forward_transient, backward_transient;
    double forward_ms, backward_ms;
  } s{full.input_bytes,        full.output_bytes, full.saved_bytes, full.forward_transient,
      full.backward_transient, full.forward_ms,   full.backward_ms};
  if (sp.level != Level::kKeep && full.has_slim) {
    s.saved_bytes = full.saved_bytes_slim;
    s.forward_transient = full.forward_transient_slim;
    s.backward_transient = full.backward_transient_slim;
    s.forward_ms = full.forward_ms_slim;
    s.backward_ms = full.backward_ms_slim;
  }
  const double chunks = static_cast<double>(std::max<int64_t>(1, sp.chunks));
  const auto chunked = [&](int64_t transient, int64_t floor_bytes) {
    const int64_t rest = std::max<int64_t>(0, transient - floor_bytes);
    return floor_bytes + static_cast<int64_t>(static_cast<double>(rest) / chunks);
  };
  const double overhead = 1.0 + 0.03 * (chunks - 1);
  // Saved bytes other than the stage input.
  const int64_t saved = s.saved_bytes;
  const int64_t fwd_keep = chunked(s.forward_transient, s.output_bytes);
  const int64_t fwd_nograd = std::max<int64_t>(s.output_bytes, fwd_keep - saved);
  const int64_t bwd = chunked(s.backward_transient, s.output_bytes);
  c.fwd_ms = s.forward_ms * overhead;
  c.bwd_ms = s.backward_ms * overhead;
  switch (sp.level) {
    case Level::kKeep:
    case Level::kSlim:
      c.fwd_peak_extra = fwd_keep;
      c.held = saved;
      c.bwd_peak_extra = bwd;
      break;
    case Level::kOffload:
      c.fwd_peak_extra =
          std::max(fwd_nograd, fwd_keep - std::max<int64_t>(0, saved - o.max_inflight_bytes()));
      c.offloaded = saved;
      c.restored = saved;
      c.bwd_peak_extra = bwd;
      break;
    case Level::kRecompute:
      c.fwd_peak_extra = fwd_nograd;
      c.held = s.input_bytes;
      c.restored = saved;
      c.bwd_peak_extra = std::max(bwd, fwd_keep);
      c.bwd_ms += c.fwd_ms;
      break;
    case Level::kRecomputeOffload:
      c.fwd_peak_extra = fwd_nograd;
      c.offloaded = s.input_bytes;
      c.restored = s.input_bytes + saved;
      c.bwd_peak_extra = std::max(bwd, fwd_keep);
      c.bwd_ms += c.fwd_ms;
      break;
  }
  return c;
}

}  // namespace

namespace {

// One micro-batch of `profile.batch` entries under plan's stage levels.
Estimate estimate_one(const Profile& profile, const Plan& plan, const OffloadOptions& options) {
  const auto n = profile.stages.size();
  TORCH_CHECK(plan.stages.size() == n, "fno offload: plan has ", plan.stages.size(),
              " stages, profile ", n);
  std::vector<StageCost> cost(n);
  for (size_t i = 0; i < n; ++i) cost[i] = stage_cost(profile.stages[i], plan.stages[i], options);
  Estimate e;
  const char* peak_phase = "forward";
  size_t peak_stage = 0;
  const auto note = [&](int64_t bytes, const char* phase, size_t i) {
    if (bytes > e.peak_bytes) {
      e.peak_bytes = bytes;
      peak_phase = phase;
      peak_stage = i;
    }
  };
  // Forward: what earlier stages hold, plus this stage's input and transient.
  int64_t held = profile.base_bytes;
  double fwd_ms = 0, bwd_ms = 0, d2h = 0, h2d = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto& s = profile.stages[i];
    note(held + s.input_bytes + cost[i].fwd_peak_extra, "forward", i);
    held += cost[i].held;
    fwd_ms += cost[i].fwd_ms;
    e.offloaded_bytes += cost[i].offloaded;
  }
  // Backward, last stage first.
  int64_t below = held;  // base plus what every stage holds
  for (size_t k = n; k-- > 0;) {
    const auto& s = profile.stages[k];
    below -= cost[k].held;
    int64_t prefetch = 0;
    for (size_t j = k; j-- > 0 && j + static_cast<size_t>(options.prefetch_depth()) >= k;) {
      prefetch += cost[j].offloaded;
    }
    prefetch = std::min(prefetch, options.max_prefetch_bytes());
    const int64_t at_start =
        below + profile.grad_bytes + cost[k].held + cost[k].restored + s.output_bytes + prefetch;
    note(at_start + cost[k].bwd_peak_extra, "backward", k);
    bwd_ms += cost[k].bwd_ms;
  }
  // Link bytes: bfloat16 storage halves what float32 activations move.
  const double link = options.compress() == Compress::kBF16 ? 0.5 : 1.0;
  const auto d2h_ms = [&](int64_t b) {
    return link * static_cast<double>(b) / (profile.d2h_gbps * 1e6);
  };
  const auto h2d_ms = [&](int64_t b) {
    return link * static_cast<double>(b) / (profile.h2d_gbps * 1e6);
  };
  for (size_t i = 0; i < n; ++i) {
    d2h += d2h_ms(cost[i].offloaded);
    // The last stage keeps its GPU copy for the turn (ScopeOptions::last): no reload.
    if (i + 1 < n) h2d += h2d_ms(cost[i].offloaded);
  }
  // The reload of the last offloaded stage before the last one starts at the
  // turn: only the backward of the stages after it can cover it.
  double tail = 0;
  double after = 0;
  for (size_t k = n - 1; k-- > 0;) {
    after += cost[k + 1].bwd_ms;
    if (cost[k].offloaded > 0) {
      tail = std::max(0.0, h2d_ms(cost[k].offloaded) - after);
      break;
    }
  }
  e.step_ms = std::max(fwd_ms, d2h) + std::max(bwd_ms, h2d) + tail;
  e.peak_at = std::string(peak_phase) + " " + profile.stages[peak_stage].name;
  return e;
}

// Micro-batching: k runs of a batch of ceil(B / k), the rest of the input resident.
Estimate scale_micro(Estimate e, const Profile& full, const Profile& micro, int64_t k) {
  e.step_ms *= static_cast<double>(k);
  e.offloaded_bytes *= k;
  if (!full.stages.empty())
    e.peak_bytes += full.stages[0].input_bytes - micro.stages[0].input_bytes;
  return e;
}

int64_t micro_batch_size(int64_t batch, int64_t k) { return (batch + k - 1) / k; }

}  // namespace

Estimate estimate(const Profile& profile, const Plan& plan, const OffloadOptions& options) {
  const int64_t k = std::max<int64_t>(1, plan.micro_batches);
  if (k == 1) return estimate_one(profile, plan, options);
  TORCH_CHECK(k <= profile.batch, "fno offload: ", k, " micro-batches of a batch of ",
              profile.batch);
  const auto micro = profile.scaled_to_batch(micro_batch_size(profile.batch, k));
  return scale_micro(estimate_one(micro, plan, options), profile, micro, k);
}

namespace {

// Calls visit(plan, estimate, level_code) for every plan of the search space.
template <typename Visit>
void for_each_plan_one(const Profile& profile, const OffloadOptions& options, Visit&& visit) {
  const auto n = profile.stages.size();
  static constexpr Level kLevels[] = {Level::kKeep, Level::kOffload, Level::kRecompute,
                                      Level::kRecomputeOffload, Level::kSlim};
  constexpr size_t kN = sizeof(kLevels) / sizeof(kLevels[0]);
  // Batch chunk counts: one choice for the first stage, one for the last and
  // one shared by the inner ones (lifting and projection are the largest).
  std::vector<int64_t> chunk_options;
  for (int64_t c = 1; c <= profile.batch; c *= 2) chunk_options.push_back(c);
  if (chunk_options.back() != profile.batch) chunk_options.push_back(profile.batch);
  const auto group_of = [&](size_t i) -> size_t { return i == 0 ? 0 : (i + 1 == n ? 1 : 2); };
  std::array<bool, 3> group_chunkable{false, false, false};
  for (size_t i = 0; i < n; ++i) group_chunkable[group_of(i)] |= profile.stages[i].chunkable;
  size_t chunk_combos = 1;
  for (bool g : group_chunkable) chunk_combos *= g ? chunk_options.size() : 1;
  // Stages whose level is searched independently; with many stages, the inner
  // ones share one level (5^6 level patterns at most, each at 64 chunk choices).
  const bool tied = n > 6;
  std::vector<size_t> free_stages;
  for (size_t i = 0; i < n; ++i) {
    if (!tied || i == 0 || i + 1 == n || i == 1) free_stages.push_back(i);
  }
  size_t level_combos = 1;
  for (size_t i = 0; i < free_stages.size(); ++i) level_combos *= kN;
  Plan plan;
  plan.stages.resize(n);
  for (size_t lc = 0; lc < level_combos; ++lc) {
    size_t code = lc;
    for (size_t k = 0; k < free_stages.size(); ++k) {
      plan.stages[free_stages[k]].level = kLevels[code % kN];
      code /= kN;
    }
    if (tied) {
      for (size_t i = 2; i + 1 < n; ++i) plan.stages[i].level = plan.stages[1].level;
    }
    for (size_t cc = 0; cc < chunk_combos; ++cc) {
      std::array<int64_t, 3> group_chunks{1, 1, 1};
      size_t ccode = cc;
      for (size_t g = 0; g < 3; ++g) {
        if (!group_chunkable[g]) continue;
        group_chunks[g] = chunk_options[ccode % chunk_options.size()];
        ccode /= chunk_options.size();
      }
      for (size_t i = 0; i < n; ++i) {
        plan.stages[i].chunks = profile.stages[i].chunkable ? group_chunks[group_of(i)] : 1;
      }
      visit(plan, estimate_one(profile, plan, options), lc);
    }
  }
}

// Every plan of the search space: stage levels, batch chunks per stage group,
// and whole-step micro-batches (1, 2, 4, ... up to the batch).
template <typename Visit>
void for_each_plan(const Profile& profile, const OffloadOptions& options, bool micro,
                   Visit&& visit) {
  std::vector<int64_t> ks{1};
  if (micro) {
    for (int64_t k = 2; k <= profile.batch; k *= 2) ks.push_back(k);
    if (ks.back() != profile.batch && profile.batch > 1) ks.push_back(profile.batch);
  }
  for (int64_t k : ks) {
    const auto p = k == 1 ? profile : profile.scaled_to_batch(micro_batch_size(profile.batch, k));
    for_each_plan_one(p, options, [&](const Plan& one, const Estimate& e, size_t levels) {
      Plan plan = one;
      plan.micro_batches = k;
      visit(plan, k == 1 ? e : scale_micro(e, profile, p, k),
            levels * 100003 + static_cast<size_t>(k));
    });
  }
}

}  // namespace

Plan plan_for_budget(const Profile& profile, int64_t budget, const OffloadOptions& options,
                     Estimate* estimate_out, bool* fits, bool micro_batches) {
  TORCH_CHECK(!profile.stages.empty(), "fno offload: an empty profile");
  TORCH_CHECK(budget > 0, "fno offload: the memory budget must be > 0, got ", budget);
  Plan best, smallest;
  Estimate best_e, smallest_e;
  bool found = false;
  smallest_e.peak_bytes = std::numeric_limits<int64_t>::max();
  best_e.step_ms = std::numeric_limits<double>::infinity();
  for_each_plan(profile, options, micro_batches, [&](const Plan& plan, const Estimate& e, size_t) {
    if (e.peak_bytes <= budget && e.step_ms < best_e.step_ms) {
      best = plan;
      best_e = e;
      found = true;
    }
    if (e.peak_bytes < smallest_e.peak_bytes ||
        (e.peak_bytes == smallest_e.peak_bytes && e.step_ms < smallest_e.step_ms)) {
      smallest = plan;
      smallest_e = e;
    }
  });
  if (fits != nullptr) *fits = found;
  if (estimate_out != nullptr) *estimate_out = found ? best_e : smallest_e;
  return found ? best : smallest;
}

std::vector<std::pair<Plan, Estimate>> rank_plans(const Profile& profile, int64_t budget,
                                                  const OffloadOptions& options, size_t count,
                                                  double slack, bool micro_batches) {
  TORCH_CHECK(!profile.stages.empty(), "fno offload: an empty profile");
  TORCH_CHECK(budget > 0, "fno offload: the memory budget must be > 0, got ", budget);
  const auto limit = static_cast<int64_t>(static_cast<double>(budget) * slack);
  std::map<size_t, std::pair<Plan, Estimate>> best_per_levels;
  for_each_plan(profile, options, micro_batches,
                [&](const Plan& plan, const Estimate& e, size_t levels) {
                  if (e.peak_bytes > limit) return;
                  auto it = best_per_levels.find(levels);
                  if (it == best_per_levels.end() || e.step_ms < it->second.second.step_ms) {
                    best_per_levels[levels] = {plan, e};
                  }
                });
  std::vector<std::pair<Plan, Estimate>> out;
  for (auto& [k, v] : best_per_levels) out.push_back(std::move(v));
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.second.step_ms < b.second.step_ms; });
  if (out.size() > count) out.resize(count);
  return out;
}

MemoryAdvice out_of_memory_advice(const Profile& profile, const Policy& current, int64_t capacity,
                                  const OffloadOptions& options) {
  std::vector<Stage> stages(profile.stages.size());
  for (size_t i = 0; i < stages.size(); ++i) {
    stages[i].name = profile.stages[i].name;
    stages[i].chunkable = profile.stages[i].chunkable;
  }
  MemoryAdvice a;
  a.capacity = capacity;
  if (!current.is(Policy::Kind::kAuto)) {
    a.has_current = true;
    a.current = estimate(profile, plan_for_policy(current, stages), options);
  }
  a.least.estimate.peak_bytes = std::numeric_limits<int64_t>::max();
  for (const auto kind : {Policy::Kind::kNone, Policy::Kind::kSlim, Policy::Kind::kRecompute,
                          Policy::Kind::kAll, Policy::Kind::kRecomputeOffload}) {
    for (int64_t chunks = 1; chunks <= profile.batch; chunks *= 2) {
      PolicyChoice c{Policy::of(kind), chunks, {}};
      c.estimate = estimate(profile, plan_for_policy(c.policy, stages, chunks), options);
      if (c.estimate.peak_bytes < a.least.estimate.peak_bytes) a.least = c;
      if (static_cast<double>(c.estimate.peak_bytes) <= 0.9 * static_cast<double>(capacity) &&
          (!a.fits || c.estimate.step_ms < a.fastest.estimate.step_ms)) {
        a.fits = true;
        a.fastest = c;
      }
    }
  }
  return a;
}

}  // namespace fno::offload
