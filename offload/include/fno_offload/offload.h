// offload/: activation memory for training on grids that do not fit in GPU memory.
//
// Memory levels of a saved activation (llm.c style, one place):
//   kKeep              saved tensors stay on the GPU (plain autograd)
//   kSlim              the stage stores only what is expensive to make again
//                      (Stage::fn_slim) and recomputes the rest in backward;
//                      what it stores stays on the GPU
//   kOffload           as kSlim, and the stored tensors >= min_bytes are copied to pinned host
//   memory
//                      on a copy stream while compute goes on, released on the GPU
//                      when the copy completes, and prefetched back during backward
//   kRecompute         the stage runs without saving; backward re-runs it (checkpointing)
//   kRecomputeOffload  as kRecompute, with the stage input it keeps offloaded
//
// How: LibTorch has no public C++ saved-tensor-hooks API, but the autograd engine
// asks Engine::get_default_saved_variable_hooks() for every SavedVariable. An
// Offloader installs (once) an Engine subclass returning its hooks while an
// OffloadGuard is alive. The active Offloader is process-global, not thread-local:
// backward, and the recompute inside it, run on autograd worker threads.
//
//   fno::offload::Offloader off(fno::offload::OffloadOptions().prefetch_depth(2));
//   off.exclude(model);                       // parameters and buffers are never moved
//   {
//     fno::offload::OffloadGuard guard(off);  // hooks on
//     auto loss = loss_fn(fno::offload::run_stages(stages, plan, x, &off), y);
//     loss.backward();                        // prefetch ahead, reload, recompute
//   }
//   auto stats = off.end_step();              // bytes, GB/s, waits, peak memory
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace fno::offload {

/// What happens to the activations a stage saves for backward.
/// Every level but kKeep runs the stage's fn_slim, where it has one.
enum class Level { kKeep, kOffload, kRecompute, kRecomputeOffload, kSlim };
std::string to_string(Level level);
bool offloads(Level level);    // kOffload, kRecomputeOffload
bool recomputes(Level level);  // kRecompute, kRecomputeOffload

/// How offloaded float32 activations are stored on the host.
///   kNone  lossless: the bytes as they are
///   kBF16  rounded to bfloat16 on the GPU before the copy, widened after the
///          reload: half the PCIe bytes and pinned memory, a relative error of
///          at most 2^-9 per element (other dtypes move as they are)
enum class Compress { kNone, kBF16 };
std::string to_string(Compress compress);
/// "none" | "bf16"; throws std::invalid_argument naming the text.
Compress parse_compress(const std::string& text);

struct OffloadOptions {
  /// Saved tensors whose storage is smaller than this many bytes stay on the GPU.
  TORCH_ARG(int64_t, min_bytes) = int64_t{1} << 20;
  /// Backward prefetches the offloaded tensors of this many scopes ahead of the one running.
  TORCH_ARG(int64_t, prefetch_depth) = 1;
  /// Device-to-host bytes in flight before forward waits for the oldest copy (back-pressure):
  /// the window. GPU copies of offloaded tensors are released at the pace the link drains them,
  /// so the window is GPU memory that forward holds on top of what it keeps.
  TORCH_ARG(int64_t, max_inflight_bytes) = int64_t{1} << 30;
  /// > 0: the window learns. After a step whose forward waited on the link, it grows by the
  /// bytes the link drained during that wait (grown_inflight_window), as long as the step's
  /// peak plus the growth stays within this many bytes of GPU memory. 0: the window is fixed.
  TORCH_ARG(int64_t, inflight_memory_limit) = 0;
  /// Prefetched, not yet used bytes at most (a tensor larger than this is still fetched).
  TORCH_ARG(int64_t, max_prefetch_bytes) = int64_t{3} << 30;
  /// Pinned host bytes at most; 0: as much as cudaHostAlloc gives. Beyond it, tensors stay.
  TORCH_ARG(int64_t, host_memory_limit) = 0;
  /// Pinned memory is taken from the driver in slabs of at least this many bytes.
  TORCH_ARG(int64_t, slab_bytes) = int64_t{1} << 30;
  /// Treat CPU tensors as offloadable (copied to a separate host pool): tests only.
  TORCH_ARG(bool, simulate_on_cpu) = false;
  /// Record a GPU memory timeline (allocator samples every ~0.5 ms and at scope edges).
  TORCH_ARG(bool, record_timeline) = false;
  /// Host storage of offloaded float32 activations (kBF16: half the bytes, lossy).
  TORCH_ARG(Compress, compress) = Compress::kNone;
};

/// One point of the memory timeline.
struct MemorySample {
  double t_ms = 0;        // since the step began (host clock)
  int64_t allocated = 0;  // bytes held by tensors (caching allocator)
  int64_t reserved = 0;   // bytes the caching allocator holds from the driver
  std::string phase;      // "forward" | "backward" | "idle"
  std::string event;      // "" for periodic samples, else e.g. "begin block.2"
};

/// A memory timeline as CSV: a "# comment" line, then t_ms,allocated_bytes,
/// reserved_bytes,phase,event (what fno_train and fno_bench write, notebooks read).
std::string timeline_csv(const std::vector<MemorySample>& samples, const std::string& comment);

/// What one training step moved and waited for.
struct StepStats {
  int64_t saved_tensors = 0;       // pack calls
  int64_t offloaded_tensors = 0;   // storages copied to the host
  int64_t dedup_hits = 0;          // saves whose storage was already offloaded
  int64_t kept_small = 0;          // below min_bytes
  int64_t kept_parameter = 0;      // parameters, buffers and their views
  int64_t kept_level = 0;          // the scope's level keeps them
  int64_t kept_last = 0;           // saved by the last scope of forward (ScopeOptions::last)
  int64_t kept_degraded = 0;       // no pinned memory to be had: kept on the GPU
  int64_t compressed_tensors = 0;  // storages moved as bfloat16 (Compress::kBF16)
  // Bytes over the link (halved for compressed storages):
  int64_t bytes_offloaded = 0;          // device -> host
  int64_t bytes_prefetched = 0;         // host -> device, issued ahead of need
  int64_t bytes_fetched_on_demand = 0;  // host -> device, issued at the moment of need
  // Offloaded, yet used from the GPU copy: unpacked before the copy released it,
  // or saved again by the last scope of forward (ScopeOptions::last).
  int64_t bytes_reused_on_device = 0;
  double d2h_seconds = 0;  // copy-engine busy time, device -> host
  double h2d_seconds = 0;  // copy-engine busy time, host -> device
  double d2h_gbps = 0;     // bytes_offloaded / d2h_seconds / 1e9
  double h2d_gbps = 0;
  double link_overlap_ms = 0;  // time both directions were busy at once
  double d2h_peak_gbps = 0;    // the link's best rates, measured once per copy engine
  double h2d_peak_gbps = 0;
  /// The least time the link needs for this step's bytes: each direction's
  /// bytes over its best rate, the larger of the two (they run at once).
  double link_floor_ms() const;
  double forward_wait_ms = 0;     // host time forward was held back by back-pressure
  double forward_stall_ms = 0;    // GPU time the compute stream sat idle meanwhile
  int64_t inflight_window = 0;    // the back-pressure window this step ran with (bytes)
  double backward_wait_ms = 0;    // GPU time the compute stream waited for reloads
  int64_t peak_allocated = 0;     // max bytes held by tensors during the step
  int64_t peak_reserved = 0;      // max bytes the caching allocator held
  int64_t host_pinned_bytes = 0;  // the pinned pool's size
  std::vector<MemorySample> timeline;
  /// One JSON object, without the timeline.
  std::string to_json() const;
};

/// The back-pressure window after a step that ran with `window` and gave `step`.
/// While forward's host thread waited on back-pressure, the GPU sat idle for
/// step.forward_stall_ms (a host wait while the GPU still has queued work costs
/// nothing) and the link drained bytes_offloaded / d2h_seconds meanwhile: had
/// those bytes been allowed in flight, the GPU would not have stalled. The
/// growth stops where the step's peak plus the growth would exceed
/// `memory_limit`; growths under 1 MiB are dropped, and the window never
/// shrinks. `memory_limit` <= 0: unchanged.
int64_t grown_inflight_window(int64_t window, const StepStats& step, int64_t memory_limit);

/// Owns the pinned pool, the copy streams and the bookkeeping; lives across steps.
class Offloader {
 public:
  explicit Offloader(OffloadOptions options = {});
  ~Offloader();
  Offloader(const Offloader&) = delete;
  Offloader& operator=(const Offloader&) = delete;

  /// Never move these storages: a module's parameters and buffers (views included).
  void exclude(const torch::nn::Module& module);
  void exclude(const at::Tensor& tensor);

  /// False on a machine without CUDA (and without simulate_on_cpu): the guard is a no-op.
  bool active() const;
  const OffloadOptions& options() const;
  /// One line: the settings and the backend.
  std::string describe() const;
  /// The back-pressure window the next step runs with: options().max_inflight_bytes(),
  /// grown after steps whose forward waited when options().inflight_memory_limit() > 0.
  int64_t inflight_window() const;

  /// Starts a step's statistics (and its peak-memory window).
  void begin_step();
  /// Waits for this step's copies, and returns and resets its statistics.
  StepStats end_step();
  /// Adds a named point to the memory timeline (when it is being recorded).
  void mark(const std::string& event);
  /// Backward is about to run the stage numbered `stage` (Scope::stage()):
  /// prefetch what the next prefetch_depth stages need. run_stages calls it
  /// from a hook on each stage's output, so stages that offload nothing (kept,
  /// slim, recomputed) still move the prefetch window along.
  void backward_reaches(int64_t stage);
  /// Record the memory timeline of the steps that begin from now on (CUDA only).
  void set_record_timeline(bool on);

  struct State;  // shared with the hooks, which can outlive the Offloader

 private:
  std::shared_ptr<State> s_;
  friend class OffloadGuard;
  friend class Scope;
  friend class HostTiles;
};

/// While alive, autograd's saved tensors go through `offloader` (any thread).
class OffloadGuard {
 public:
  explicit OffloadGuard(Offloader& offloader, Level level = Level::kOffload);
  ~OffloadGuard();
  OffloadGuard(const OffloadGuard&) = delete;
  OffloadGuard& operator=(const OffloadGuard&) = delete;

 private:
  std::shared_ptr<Offloader::State> s_;
  Level previous_level_;
};

/// How a scope sits among the stages of forward.
struct ScopeOptions {
  /// The scope continues the previous scope's stage (a later chunk of it).
  /// Backward prefetches by stage: prefetch_depth counts stages, not chunks.
  TORCH_ARG(bool, same_stage) = false;
  /// The last scope of forward. What it saves stays on the GPU: backward needs
  /// it first, so a copy to the host and back could only add a wait.
  TORCH_ARG(bool, last) = false;
};

/// A named region of forward (a stage, or a chunk of one) with its own level.
/// Scopes number the prefetch order: backward prefetches stages by that number.
class Scope {
 public:
  Scope(Offloader* offloader, const std::string& name, Level level, ScopeOptions options = {});
  ~Scope();
  /// The stage number this scope belongs to (0 without an offloader).
  int64_t stage() const { return stage_; }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::shared_ptr<Offloader::State> s_;
  Level previous_level_;
  bool previous_hold_ = false;
  int64_t stage_ = 0;
};

/// Checkpointing: y = fn(x) computed without saving anything but x; backward
/// recomputes fn(x) with grad (saved tensors kept on the GPU) and backpropagates.
/// x is saved through the hooks, so it is offloaded when the enclosing level offloads.
/// fn must be deterministic. Parameter gradients accumulate into their .grad.
// x: [*] -> fn(x): [*]
at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x,
                      Offloader* offloader = nullptr);

/// One step of a feed-forward model, as the planner sees it.
struct Stage {
  std::string name;                                 // "lifting", "block.0", ...
  std::function<at::Tensor(const at::Tensor&)> fn;  // x -> y
  /// fn treats each batch entry alone: it may run on chunks of the batch.
  bool chunkable = false;
  /// The same function storing only the activations that are expensive to
  /// recompute (empty: fn). Levels other than kKeep run it.
  std::function<at::Tensor(const at::Tensor&)> fn_slim = nullptr;
  /// The function a stage runs at `level`.
  const std::function<at::Tensor(const at::Tensor&)>& fn_at(Level level) const {
    return level != Level::kKeep && fn_slim ? fn_slim : fn;
  }
};

/// Per-stage memory level and chunk count.
struct StagePlan {
  Level level = Level::kKeep;
  int64_t chunks = 1;  // batch chunks, chunkable stages only
};

struct Plan {
  std::vector<StagePlan> stages;
  /// The whole step runs as this many micro-batches (slices of the batch), each
  /// forward and backward in turn, their parameter gradients adding up:
  /// activation memory of one micro-batch. run_stages runs one micro-batch;
  /// the caller loops (it owns the loss, which must add over batch entries).
  int64_t micro_batches = 1;
  /// "[micro_batches=K; ]name=level[/chunks]" per stage, comma-separated.
  std::string to_string(const std::vector<Stage>& stages) const;
};

/// The sizes of `parts` slices of a batch of `batch` (the first ones one larger when uneven).
std::vector<int64_t> split_sizes(int64_t batch, int64_t parts);

/// Runs the stages in order under `plan` (one entry per stage). With an
/// offloader, each stage (each chunk of one) is a Scope of the plan's level.
// x: [B, C, *S] -> [B, C', *S']
at::Tensor run_stages(const std::vector<Stage>& stages, const Plan& plan, at::Tensor x,
                      Offloader* offloader);

}  // namespace fno::offload
