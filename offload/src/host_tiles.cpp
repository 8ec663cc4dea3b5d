// HostTiles: tiles of full-size tensors in pinned host memory, moved by the
// offloader's copy engine (copy_engine.h) and counted in its StepStats.
//
// Per tile there is one Slot: its pinned memory (kept across steps), the copy
// out that fills it, and at most one reload in flight with the device storage
// it fills. A new put waits (on the device, not the host) for a reload that
// still reads the slot's old contents; a reload waits for the copy out.
#include <fno_offload/planner.h>
#include <fno_offload/tiles.h>

#include "copy_engine.h"
#include "state.h"

#include <deque>
#include <utility>

namespace fno::offload {

namespace {

struct Slot {
  void* host = nullptr;  // pinned, `capacity` bytes
  int64_t capacity = 0;
  bool filled = false;
  std::vector<int64_t> sizes;
  at::TensorOptions options;
  int64_t bytes = 0;       // on the device
  int64_t link_bytes = 0;  // over the link and on the host
  bool compressed = false;
  std::shared_ptr<detail::Ticket> out;  // the copy to the host
  std::shared_ptr<detail::Ticket> in;   // the latest reload
  c10::Storage fetched;                 // its storage, not yet handed out
  bool ahead = false;                   // fetched by the prefetcher
};

}  // namespace

struct HostTiles::Impl {
  std::shared_ptr<Offloader::State> s;
  std::string name;
  int64_t prefetch_tiles = 2;
  std::vector<Slot> slots;
  std::vector<int64_t> order;                       // the expected gets
  size_t next = 0;                                  // the next of them to prefetch
  int64_t ahead = 0;                                // prefetched, not yet read
  int64_t cap = -1;  // expect(order, ahead): tiles fetched before the first get
  std::deque<std::pair<int64_t, int64_t>> leaving;  // (tile, link bytes) copying out
  int64_t leaving_bytes = 0;

  Slot& slot(int64_t t) {
    TORCH_CHECK(t >= 0, "fno offload: ", name, ": tile ", t, " < 0");
    if (static_cast<int64_t>(slots.size()) <= t) slots.resize(static_cast<size_t>(t) + 1);
    return slots[static_cast<size_t>(t)];
  }

  // Copies out that are done no longer hold GPU memory.
  void poll_locked() {
    while (!leaving.empty() && slots[static_cast<size_t>(leaving.front().first)].out->done()) {
      leaving_bytes -= leaving.front().second;
      leaving.pop_front();
    }
  }

  void fetch_locked(Slot& sl, bool is_ahead) {
    sl.fetched = s->engine->copy_in(sl.host, sl.bytes, sl.options.device(), sl.compressed,
                                    sl.out.get(), &sl.in);
    sl.ahead = is_ahead;
    (is_ahead ? s->stats.bytes_prefetched : s->stats.bytes_fetched_on_demand) += sl.link_bytes;
    if (is_ahead) ++ahead;
  }

  void prefetch_locked() {
    const int64_t limit = cap >= 0 ? std::min(cap, prefetch_tiles) : prefetch_tiles;
    while (ahead < limit && next < order.size()) {
      const int64_t t = order[next++];
      if (t < 0 || t >= static_cast<int64_t>(slots.size())) continue;
      auto& sl = slots[static_cast<size_t>(t)];
      if (sl.filled && !static_cast<bool>(sl.fetched)) fetch_locked(sl, /*ahead=*/true);
    }
  }

  void drop_fetched(Slot& sl) {
    if (!static_cast<bool>(sl.fetched)) return;
    if (sl.ahead) --ahead;
    sl.fetched = c10::Storage();  // the h2d stream's pool takes it back after the copy
  }
};

HostTiles::HostTiles(Offloader& offloader, std::string name, int64_t prefetch_tiles)
    : p_(std::make_unique<Impl>()) {
  p_->s = offloader.s_;
  p_->name = std::move(name);
  p_->prefetch_tiles = prefetch_tiles;
  TORCH_CHECK(p_->s->engine != nullptr, "fno offload: ", p_->name,
              ": host tiles need an active offloader (a CUDA device, or simulate_on_cpu)");
  TORCH_CHECK(prefetch_tiles >= 0, "fno offload: prefetch_tiles must be >= 0, got ",
              prefetch_tiles);
}

HostTiles::~HostTiles() {
  std::lock_guard<std::mutex> lock(p_->s->mu);
  for (auto& sl : p_->slots) {
    sl.fetched = c10::Storage();
    if (sl.host != nullptr) p_->s->engine->host_free(sl.host, sl.capacity);
  }
}

void HostTiles::put(int64_t t, const at::Tensor& tile, bool held) {
  auto& p = *p_;
  const auto src = tile.contiguous();
  std::lock_guard<std::mutex> lock(p.s->mu);
  auto& sl = p.slot(t);
  p.drop_fetched(sl);  // stale
  const auto& o = p.s->options;
  const int64_t bytes = static_cast<int64_t>(src.nbytes());
  const bool compress =
      o.compress() == Compress::kBF16 && src.scalar_type() == at::kFloat && bytes % 4 == 0;
  const int64_t link = compress ? bytes / 2 : bytes;
  if (sl.capacity < link) {
    if (sl.host != nullptr) p.s->engine->host_free(sl.host, sl.capacity);
    sl.host = p.s->engine->host_alloc_persistent(link);
    sl.capacity = sl.host != nullptr ? link : 0;
    if (sl.host == nullptr) {
      throw BudgetError("fno offload: no pinned host memory for tile " + std::to_string(t) +
                        " of the " + p.name + " (" + format_bytes(link) + "; " +
                        format_bytes(p.s->engine->host_capacity()) + " pinned so far" +
                        (o.host_memory_limit() > 0
                             ? ", offload.host_memory_limit " + format_bytes(o.host_memory_limit())
                             : std::string()) +
                        ")");
    }
  }
  sl.filled = true;
  sl.sizes = src.sizes().vec();
  sl.options = src.options();
  sl.bytes = bytes;
  sl.link_bytes = link;
  sl.compressed = compress;
  sl.out = p.s->engine->copy_out(src.storage(), sl.host, bytes, compress, sl.in.get());
  sl.out->staging = c10::Storage();  // the engine keeps it alive for the copy
  ++p.s->stats.offloaded_tensors;
  if (compress) ++p.s->stats.compressed_tensors;
  p.s->stats.bytes_offloaded += link;
  // Back-pressure: the GPU copies go back at the pace the link drains them.
  p.leaving.emplace_back(t, link);
  p.leaving_bytes += link;
  p.poll_locked();
  if (!held && p.leaving_bytes > p.s->window && p.leaving.size() > 1) {
    const auto t0 = Clock::now();
    p.s->engine->host_wait_begins(src.device());
    while (p.leaving_bytes > p.s->window && p.leaving.size() > 1) {
      p.slots[static_cast<size_t>(p.leaving.front().first)].out->host_wait();
      p.poll_locked();
    }
    p.s->engine->host_wait_ends(src.device());
    p.s->stats.forward_wait_ms += ms_since(t0);
  }
}

at::Tensor HostTiles::get(int64_t t) {
  auto& p = *p_;
  std::lock_guard<std::mutex> lock(p.s->mu);
  TORCH_CHECK(
      t >= 0 && t < static_cast<int64_t>(p.slots.size()) && p.slots[static_cast<size_t>(t)].filled,
      "fno offload: ", p.name, ": tile ", t, " was never stored");
  auto& sl = p.slots[static_cast<size_t>(t)];
  if (!static_cast<bool>(sl.fetched)) p.fetch_locked(sl, /*ahead=*/false);
  if (sl.ahead) --p.ahead;
  sl.ahead = false;
  auto storage = std::move(sl.fetched);
  sl.fetched = c10::Storage();
  sl.in->stream_wait();
  p.s->engine->record_use(storage);
  p.cap = -1;
  p.prefetch_locked();
  return at::empty({0}, sl.options).set_(storage, 0, sl.sizes);
}

void HostTiles::expect(const std::vector<int64_t>& order, int64_t ahead) {
  auto& p = *p_;
  std::lock_guard<std::mutex> lock(p.s->mu);
  for (auto& sl : p.slots) p.drop_fetched(sl);
  p.ahead = 0;
  p.cap = ahead;
  p.order = order;
  p.next = 0;
  p.prefetch_locked();
}

void HostTiles::clear() {
  auto& p = *p_;
  std::lock_guard<std::mutex> lock(p.s->mu);
  for (auto& sl : p.slots) {
    p.drop_fetched(sl);
    sl.filled = false;
  }
  p.ahead = 0;
  p.cap = -1;
  p.order.clear();
  p.next = 0;
}

int64_t HostTiles::host_bytes() const {
  int64_t total = 0;
  for (const auto& sl : p_->slots) total += sl.capacity;
  return total;
}

}  // namespace fno::offload
