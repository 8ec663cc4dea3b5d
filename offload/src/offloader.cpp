// The offloader: an autograd Engine whose default saved-variable hooks move
// saved activations to host memory, and the bookkeeping behind them.
//
// Per saved storage (not per tensor: a storage saved twice, or through several
// views, moves once) there is one Entry:
//
//   pack:   kCopyingOut --copy done--> kOnHost --prefetch / demand--> kCopyingIn
//              |                                                        |
//              +--(unpacked before the copy released it)--> used in place   +--> used
//
// Forward waits for the oldest copy when more than the window (max_inflight_bytes,
// or what it learned: grown_inflight_window) is in flight, so the GPU copies are
// released at the pace the link drains them.
// What the last scope of forward saves stays on the GPU (ScopeOptions::last):
// backward needs it first, and a reload could not hide behind anything; an
// entry an earlier chunk of that stage offloaded keeps (or takes back) its GPU copy.
// Backward prefetches, in reverse pack order, the entries of the next
// prefetch_depth stages (up to max_prefetch_bytes not yet used); the chunks of
// one stage count once.
#include <fno_offload/offload.h>

#include "copy_engine.h"
#include "state.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>
#include <torch/nn/module.h>

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace fno::offload {

std::string to_string(Level level) {
  switch (level) {
    case Level::kKeep:
      return "keep";
    case Level::kOffload:
      return "offload";
    case Level::kRecompute:
      return "recompute";
    case Level::kRecomputeOffload:
      return "recompute+offload";
    case Level::kSlim:
      return "slim";
  }
  return "?";
}
bool offloads(Level level) { return level == Level::kOffload || level == Level::kRecomputeOffload; }
bool recomputes(Level level) {
  return level == Level::kRecompute || level == Level::kRecomputeOffload;
}

std::string to_string(Compress compress) { return compress == Compress::kBF16 ? "bf16" : "none"; }

Compress parse_compress(const std::string& text) {
  if (text == "none") return Compress::kNone;
  if (text == "bf16") return Compress::kBF16;
  throw std::invalid_argument("unknown offload compression '" + text + "' (expected none or bf16)");
}

std::string timeline_csv(const std::vector<MemorySample>& samples, const std::string& comment) {
  std::ostringstream csv;
  csv << "# " << comment << "\n"
      << "t_ms,allocated_bytes,reserved_bytes,phase,event\n";
  for (const auto& m : samples) {
    csv << m.t_ms << ',' << m.allocated << ',' << m.reserved << ',' << m.phase << ',' << m.event
        << "\n";
  }
  return csv.str();
}

std::string StepStats::to_json() const {
  std::ostringstream o;
  o << std::setprecision(6) << "{\"saved_tensors\": " << saved_tensors
    << ", \"offloaded_tensors\": " << offloaded_tensors
    << ", \"compressed_tensors\": " << compressed_tensors << ", \"dedup_hits\": " << dedup_hits
    << ", \"kept_small\": " << kept_small << ", \"kept_parameter\": " << kept_parameter
    << ", \"kept_level\": " << kept_level << ", \"kept_last\": " << kept_last
    << ", \"kept_degraded\": " << kept_degraded << ", \"bytes_offloaded\": " << bytes_offloaded
    << ", \"bytes_prefetched\": " << bytes_prefetched
    << ", \"bytes_fetched_on_demand\": " << bytes_fetched_on_demand
    << ", \"bytes_reused_on_device\": " << bytes_reused_on_device
    << ", \"d2h_seconds\": " << d2h_seconds << ", \"h2d_seconds\": " << h2d_seconds
    << ", \"d2h_gbps\": " << d2h_gbps << ", \"h2d_gbps\": " << h2d_gbps
    << ", \"link_overlap_ms\": " << link_overlap_ms << ", \"d2h_peak_gbps\": " << d2h_peak_gbps
    << ", \"h2d_peak_gbps\": " << h2d_peak_gbps << ", \"link_floor_ms\": " << link_floor_ms()
    << ", \"forward_wait_ms\": " << forward_wait_ms
    << ", \"forward_stall_ms\": " << forward_stall_ms
    << ", \"inflight_window\": " << inflight_window
    << ", \"backward_wait_ms\": " << backward_wait_ms << ", \"peak_allocated\": " << peak_allocated
    << ", \"peak_reserved\": " << peak_reserved << ", \"host_pinned_bytes\": " << host_pinned_bytes
    << "}";
  return o.str();
}

double StepStats::link_floor_ms() const {
  double ms = 0;
  if (d2h_peak_gbps > 0) ms = static_cast<double>(bytes_offloaded) / d2h_peak_gbps / 1e6;
  if (h2d_peak_gbps > 0) {
    ms = std::max(ms, static_cast<double>(bytes_prefetched + bytes_fetched_on_demand) /
                          h2d_peak_gbps / 1e6);
  }
  return ms;
}

int64_t grown_inflight_window(int64_t window, const StepStats& step, int64_t memory_limit) {
  if (memory_limit <= 0 || step.forward_stall_ms <= 0 || step.d2h_seconds <= 0) return window;
  // The bytes the link moved while the GPU waited for forward's host thread.
  const double drained =
      static_cast<double>(step.bytes_offloaded) / step.d2h_seconds * (step.forward_stall_ms / 1e3);
  const int64_t headroom = memory_limit - step.peak_allocated;
  const int64_t growth = std::min(static_cast<int64_t>(drained), headroom);
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (growth < kMiB) return window;
  return window + growth / kMiB * kMiB;
}


namespace {

// The process-wide active offloader (any thread: see the header).
std::mutex g_active_mu;
std::shared_ptr<Offloader::State> g_active;
std::atomic<bool> g_any_active{false};  // lock-free check for the common case

class OffloadHooks final : public torch::autograd::SavedVariableHooks {
 public:
  explicit OffloadHooks(std::shared_ptr<Offloader::State> state) : state_(std::move(state)) {}
  ~OffloadHooks() override {
    if (entry_) state_->release(entry_);
  }

  void call_pack_hook(const at::Tensor& tensor) override {
    version_ = tensor.unsafeGetTensorImpl()->version_counter();
    saved_version_ = version_.current_version();
    bool keep = true;
    entry_ = state_->pack(tensor, &keep);
    if (keep) {
      // detach(): the saved variable may be an output whose grad_fn owns these hooks.
      kept_ = tensor.detach();
      return;
    }
    options_ = tensor.options().requires_grad(false);
    sizes_ = tensor.sizes().vec();
    strides_ = tensor.strides().vec();
    offset_ = tensor.storage_offset();
  }

  at::Tensor call_unpack_hook() override {
    // With hooks, autograd skips its own saved-version check; do it here.
    TORCH_CHECK(version_.current_version() == saved_version_,
                "one of the variables needed for gradient computation has been modified by an "
                "inplace operation after it was saved (fno offload): it is at version ",
                version_.current_version(), "; expected version ", saved_version_, " instead");
    if (!entry_) return kept_;
    auto storage = state_->unpack(*entry_);
    return at::empty({0}, options_).set_(storage, offset_, sizes_, strides_);
  }

 private:
  std::shared_ptr<Offloader::State> state_;
  std::shared_ptr<Entry> entry_;
  at::Tensor kept_;
  c10::VariableVersion version_;
  uint32_t saved_version_ = 0;
  at::TensorOptions options_;
  std::vector<int64_t> sizes_, strides_;
  int64_t offset_ = 0;
};

// The autograd engine with our default hooks. Never destroyed: its worker
// threads outlive static destruction.
struct OffloadEngine final : torch::autograd::Engine {
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    if (!g_any_active.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard<std::mutex> lock(g_active_mu);
    if (!g_active) return nullptr;
    return std::make_unique<OffloadHooks>(g_active);
  }
  static torch::autograd::Engine& get() {
    static auto* engine = new OffloadEngine();
    return *engine;
  }
};

void install_engine() {
  static std::once_flag once;
  std::call_once(once, [] { torch::autograd::set_default_engine_stub(&OffloadEngine::get); });
}

// Installed when the program starts, before any backward: the autograd engine
// starts its device threads once per process (a function-level static in
// Engine::initialize_device_threads_pool), for whichever engine runs a CUDA
// backward first, so an engine installed later would have no device queues.
const bool kEngineInstalled = (install_engine(), true);

}  // namespace

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------
std::shared_ptr<Entry> Offloader::State::pack(const at::Tensor& t, bool* keep) {
  *keep = true;
  std::lock_guard<std::mutex> lock(mu);
  ++stats.saved_tensors;
  if (!engine || !t.defined() || !t.has_storage() || t.layout() != c10::kStrided ||
      !engine->accepts(t.device())) {
    ++stats.kept_level;
    return nullptr;
  }
  const auto& storage = t.storage();
  const auto* impl = storage.unsafeGetStorageImpl();
  // Parameters come as themselves or as views (weight.t()): by storage when
  // excluded, else as a leaf that requires grad, or a view of one.
  const bool parameter_like = (t.is_leaf() && t.requires_grad()) ||
                              (t.is_view() && t._base().is_leaf() && t._base().requires_grad());
  if (excluded.count(impl) || parameter_like) {
    ++stats.kept_parameter;
    return nullptr;
  }
  if (!offloads(level)) {
    ++stats.kept_level;
    return nullptr;
  }
  const auto bytes = static_cast<int64_t>(storage.nbytes());
  if (bytes < options.min_bytes()) {
    ++stats.kept_small;
    return nullptr;
  }
  if (auto it = by_storage.find(impl); it != by_storage.end()) {
    if (auto e = it->second.lock()) {
      ++stats.dedup_hits;
      ++e->refs;
      if (!in_backward && e->stage != stage) {
        // Saved again by a later stage (a constant several stages read):
        // backward needs it from that stage on, so it is prefetched from there.
        e->stage = stage;
        order.push_back(e);
      }
      if (hold_scope && !in_backward) {
        // Saved again by the last scope (a later chunk's view of one storage):
        // keep, or take back, the GPU copy, which is still alive (t is).
        e->hold = true;
        if (e->where == Entry::Where::kOnHost) {
          e->device = storage;
          e->where = Entry::Where::kOnDevice;
        }
      }
      *keep = false;
      return e;
    }
  }
  if (hold_scope && !in_backward) {
    // The last scope of forward: backward needs these first, so they stay.
    ++stats.kept_last;
    return nullptr;
  }
  poll_locked();
  const bool compress =
      options.compress() == Compress::kBF16 && t.scalar_type() == at::kFloat && bytes % 4 == 0;
  const int64_t link_bytes = compress ? bytes / 2 : bytes;
  void* host = engine->host_alloc(link_bytes);
  if (host == nullptr) {
    ++stats.kept_degraded;
    if (!warned_degraded) {
      warned_degraded = true;
      std::cerr << "fno offload: warning: no pinned host memory for a " << link_bytes
                << "-byte activation (pool " << engine->host_capacity()
                << " bytes); keeping such activations on the GPU\n";
    }
    return nullptr;
  }
  auto e = std::make_shared<Entry>(storage);
  e->device_id = t.device();
  e->host = host;
  e->bytes = bytes;
  e->link_bytes = link_bytes;
  e->index = static_cast<int64_t>(order.size());
  e->stage = stage;
  e->refs = 1;
  e->compressed = compress;
  e->out = engine->copy_out(storage, host, bytes, compress);
  // A compressed copy reads its own staging buffer: the original is not needed from here on.
  if (compress) e->device = c10::Storage();
  order.push_back(e);
  by_storage[impl] = e;
  copying_out.push_back(e);
  inflight_bytes += link_bytes;
  ++live_entries;
  ++stats.offloaded_tensors;
  if (compress) ++stats.compressed_tensors;
  stats.bytes_offloaded += link_bytes;
  // Back-pressure: the GPU copies are freed at the pace the link drains them.
  if (inflight_bytes > window && copying_out.size() > 1) {
    const auto t0 = Clock::now();
    engine->host_wait_begins(e->device_id);
    while (inflight_bytes > window && copying_out.size() > 1) {
      copying_out.front()->out->host_wait();
      poll_locked();
    }
    engine->host_wait_ends(e->device_id);
    stats.forward_wait_ms += ms_since(t0);
  }
  *keep = false;
  return e;
}

void Offloader::State::poll_locked() {
  while (!copying_out.empty() && copying_out.front()->out->done()) {
    auto e = std::move(copying_out.front());
    copying_out.pop_front();
    inflight_bytes -= e->link_bytes;
    e->out->staging = c10::Storage();
    if (e->where != Entry::Where::kCopyingOut) continue;
    if (static_cast<bool>(e->device) && (e->hold || (in_backward && e->index > cursor))) {
      // Saved by the last scope, or the prefetcher has passed it: it is needed
      // soon, keep the GPU copy.
      e->where = Entry::Where::kOnDevice;
    } else {
      e->device = c10::Storage();  // the GPU memory goes back to the allocator
      e->where = Entry::Where::kOnHost;
    }
  }
}

void Offloader::State::fetch_locked(Entry& e, bool ahead) {
  // An entry still on its way out (compressed: its GPU original is gone) is
  // reloaded after that copy, ordered on the device, not by a host wait.
  const detail::Ticket* after = e.where == Entry::Where::kCopyingOut ? e.out.get() : nullptr;
  e.device = engine->copy_in(e.host, e.bytes, e.device_id, e.compressed, after, &e.in);
  e.where = Entry::Where::kCopyingIn;
  e.prefetched = ahead;
  if (ahead) {
    stats.bytes_prefetched += e.link_bytes;
    unconsumed_prefetch_bytes += e.bytes;
  } else {
    stats.bytes_fetched_on_demand += e.link_bytes;
  }
}

void Offloader::State::prefetch_locked() {
  const int64_t lowest_stage = backward_stage - options.prefetch_depth();
  for (; cursor >= 0; --cursor) {
    auto e = order[static_cast<size_t>(cursor)].lock();
    if (!e) continue;
    if (e->stage < lowest_stage) break;
    const bool leaving = e->where == Entry::Where::kCopyingOut && !static_cast<bool>(e->device);
    if (e->where != Entry::Where::kOnHost && !leaving) continue;
    if (unconsumed_prefetch_bytes > 0 &&
        unconsumed_prefetch_bytes + e->bytes > options.max_prefetch_bytes()) {
      break;
    }
    fetch_locked(*e, /*ahead=*/true);
  }
}

void Offloader::State::enter_backward_locked(int64_t at_stage) {
  if (!in_backward) {
    in_backward = true;
    phase = 2;
    cursor = static_cast<int64_t>(order.size()) - 1;
    backward_stage = at_stage;
  }
  backward_stage = std::min(backward_stage, at_stage);
}

c10::Storage Offloader::State::unpack(Entry& e) {
  std::lock_guard<std::mutex> lock(mu);
  enter_backward_locked(e.stage);
  poll_locked();
  switch (e.where) {
    case Entry::Where::kCopyingOut:
      if (!static_cast<bool>(e.device)) {
        // Compressed, its original gone: reload behind the copy out.
        fetch_locked(e, /*ahead=*/false);
        e.in->stream_wait();
        engine->record_use(e.device);
        break;
      }
      [[fallthrough]];
    case Entry::Where::kOnDevice:
      if (!e.consumed) stats.bytes_reused_on_device += e.bytes;
      break;
    case Entry::Where::kOnHost:
      fetch_locked(e, /*ahead=*/false);
      [[fallthrough]];
    case Entry::Where::kCopyingIn:
      e.in->stream_wait();
      engine->record_use(e.device);
      break;
  }
  if (!e.consumed) {
    e.consumed = true;
    if (e.prefetched) unconsumed_prefetch_bytes -= e.bytes;
  }
  auto storage = e.device;
  prefetch_locked();
  return storage;
}

void Offloader::State::release(const std::shared_ptr<Entry>& e) {
  std::lock_guard<std::mutex> lock(mu);
  if (--e->refs > 0) return;
  // A copy to the host still running needs no wait: the engine recorded its
  // stream on the source, so the allocator reuses that memory only after it.
  // A prefetch never used: its memory belongs to the copy stream's pool, whose
  // next user is ordered after the copy, so it can go back at once.
  if (e->where == Entry::Where::kCopyingIn && !e->consumed && e->prefetched) {
    unconsumed_prefetch_bytes -= e->bytes;
  }
  e->out->staging = c10::Storage();
  e->device = c10::Storage();
  e->where = Entry::Where::kOnHost;
  if (auto it = by_storage.find(e->key._unsafe_get_target());
      it != by_storage.end() && it->second.lock() == e) {
    by_storage.erase(it);
  }
  if (--live_entries == 0) {
    // Every activation of the step is gone: reuse the pool from its start.
    poll_locked();
    copying_out.clear();
    inflight_bytes = 0;
    order.clear();
    cursor = -1;
    unconsumed_prefetch_bytes = 0;
    in_backward = false;
    by_storage.clear();
    engine->host_reset();
  }
}

// ---------------------------------------------------------------------------
// Offloader, guard, scope
// ---------------------------------------------------------------------------
Offloader::Offloader(OffloadOptions options) : s_(std::make_shared<State>(std::move(options))) {
  TORCH_CHECK(s_->options.min_bytes() >= 0, "fno offload: min_bytes must be >= 0, got ",
              s_->options.min_bytes());
  TORCH_CHECK(s_->options.prefetch_depth() >= 0, "fno offload: prefetch_depth must be >= 0, got ",
              s_->options.prefetch_depth());
  TORCH_CHECK(s_->options.max_inflight_bytes() > 0,
              "fno offload: max_inflight_bytes must be > 0, got ",
              s_->options.max_inflight_bytes());
  TORCH_CHECK(s_->options.inflight_memory_limit() >= 0,
              "fno offload: inflight_memory_limit must be >= 0, got ",
              s_->options.inflight_memory_limit());
  TORCH_CHECK(s_->options.max_prefetch_bytes() > 0,
              "fno offload: max_prefetch_bytes must be > 0, got ",
              s_->options.max_prefetch_bytes());
  TORCH_CHECK(s_->options.slab_bytes() > 0, "fno offload: slab_bytes must be > 0, got ",
              s_->options.slab_bytes());
  (void)kEngineInstalled;
}

Offloader::~Offloader() {
  std::lock_guard<std::mutex> lock(g_active_mu);
  if (g_active == s_) {
    g_active.reset();
    g_any_active = false;
  }
}

void Offloader::exclude(const torch::nn::Module& module) {
  for (const auto& p : module.parameters()) exclude(p);
  for (const auto& b : module.buffers()) exclude(b);
}

void Offloader::exclude(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return;
  std::lock_guard<std::mutex> lock(s_->mu);
  const auto& storage = tensor.storage();
  if (s_->excluded.insert(storage.unsafeGetStorageImpl()).second) {
    s_->excluded_pins.push_back(storage.getWeakStorageImpl());
  }
}

bool Offloader::active() const { return s_->engine != nullptr; }
int64_t Offloader::inflight_window() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->window;
}
const OffloadOptions& Offloader::options() const { return s_->options; }

std::string Offloader::describe() const {
  const auto& o = s_->options;
  std::ostringstream out;
  out << "offload: " << (s_->engine ? s_->engine->name() : std::string("off (no CUDA device)"))
      << ", min_bytes=" << o.min_bytes() << ", prefetch_depth=" << o.prefetch_depth()
      << ", max_inflight_bytes=" << o.max_inflight_bytes()
      << (o.inflight_memory_limit() > 0
              ? " (learns, within " + std::to_string(o.inflight_memory_limit()) + " bytes)"
              : std::string())
      << ", max_prefetch_bytes=" << o.max_prefetch_bytes()
      << ", host_memory_limit=" << o.host_memory_limit() << ", slab_bytes=" << o.slab_bytes()
      << ", compress=" << to_string(o.compress());
  return out.str();
}

void Offloader::begin_step() {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->stats = StepStats();
  }
  detail::reset_peak_stats();
  {
    std::lock_guard<std::mutex> lock(s_->timeline_mu);
    s_->timeline.clear();
  }
  s_->step_start = Clock::now();
  s_->phase = 1;
  s_->start_sampler();
  s_->mark("step begin");
}

StepStats Offloader::end_step() {
  s_->mark("step end");
  s_->stop_sampler();
  s_->phase = 0;
  StepStats out;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->engine) s_->engine->collect(s_->stats);
    s_->poll_locked();
    out = s_->stats;
    s_->stats = StepStats();
    if (s_->engine) out.host_pinned_bytes = s_->engine->host_capacity();
    out.inflight_window = s_->window;
  }
  if (out.d2h_seconds > 0)
    out.d2h_gbps = static_cast<double>(out.bytes_offloaded) / out.d2h_seconds / 1e9;
  const double in_bytes = static_cast<double>(out.bytes_prefetched + out.bytes_fetched_on_demand);
  if (out.h2d_seconds > 0) out.h2d_gbps = in_bytes / out.h2d_seconds / 1e9;
  const auto a = detail::allocator_stats();
  out.peak_allocated = a.peak_allocated;
  out.peak_reserved = a.peak_reserved;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->window = grown_inflight_window(s_->window, out, s_->options.inflight_memory_limit());
  }
  {
    std::lock_guard<std::mutex> lock(s_->timeline_mu);
    out.timeline = std::move(s_->timeline);
    s_->timeline.clear();
  }
  return out;
}

OffloadGuard::OffloadGuard(Offloader& offloader, Level level) : s_(offloader.s_) {
  if (!s_->engine) {
    static std::once_flag once;
    std::call_once(once, [] {
      std::cerr << "fno offload: no CUDA device; the offload guard does nothing (activations "
                   "stay where they are)\n";
    });
    return;
  }
  {
    std::lock_guard<std::mutex> lock(g_active_mu);
    TORCH_CHECK(!g_active || g_active == s_,
                "fno offload: another Offloader's guard is active; guards of one Offloader nest, "
                "of two do not");
    g_active = s_;
    g_any_active = true;
  }
  std::lock_guard<std::mutex> lock(s_->mu);
  ++s_->guards;
  previous_level_ = s_->level;
  s_->level = level;
}

OffloadGuard::~OffloadGuard() {
  if (!s_->engine) return;
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->level = previous_level_;
    last = --s_->guards == 0;
  }
  if (last) {
    std::lock_guard<std::mutex> lock(g_active_mu);
    if (g_active == s_) {
      g_active.reset();
      g_any_active = false;
    }
  }
}

Scope::Scope(Offloader* offloader, const std::string& name, Level level, ScopeOptions options) {
  if (offloader == nullptr) return;
  s_ = offloader->s_;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    previous_level_ = s_->level;
    previous_hold_ = s_->hold_scope;
    s_->level = level;
    if (!options.same_stage()) ++s_->stage;
    stage_ = s_->stage;
    s_->hold_scope = options.last();
    s_->poll_locked();
  }
  s_->mark("begin " + name);
}

Scope::~Scope() {
  if (!s_) return;
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->level = previous_level_;
  s_->hold_scope = previous_hold_;
}

void Offloader::mark(const std::string& event) { s_->mark(event); }

void Offloader::backward_reaches(int64_t stage) {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (!s_->engine || s_->order.empty()) return;
  s_->enter_backward_locked(stage);
  s_->poll_locked();
  s_->prefetch_locked();
}
void Offloader::set_record_timeline(bool on) { s_->record_timeline = on; }

}  // namespace fno::offload
