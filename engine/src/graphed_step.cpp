// CUDA graphs per input shape (fno_engine/graphed_step.h). The CUDA parts
// compile only with a CUDA LibTorch (FNO_CUDA_GRAPHS, set by engine/CMakeLists.txt).
#include <fno_engine/graphed_step.h>

#include <torch/torch.h>

#ifdef FNO_CUDA_GRAPHS
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <map>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace fno {

std::string to_string(CudaGraphs mode) {
  switch (mode) {
    case CudaGraphs::kAuto:
      return "auto";
    case CudaGraphs::kOn:
      return "on";
    case CudaGraphs::kOff:
      return "off";
  }
  return "?";
}

CudaGraphs parse_cuda_graphs(const std::string& text) {
  for (const auto mode : {CudaGraphs::kAuto, CudaGraphs::kOn, CudaGraphs::kOff}) {
    if (to_string(mode) == text) return mode;
  }
  throw std::invalid_argument("unknown cuda_graphs setting '" + text +
                              "' (expected auto, on or off)");
}

bool cuda_graphs_built() {
#ifdef FNO_CUDA_GRAPHS
  return true;
#else
  return false;
#endif
}

GraphDecision decide_cuda_graphs(const GraphConditions& c) {
  GraphDecision d;
  if (c.mode == CudaGraphs::kOff) return d;
  const bool on = c.mode == CudaGraphs::kOn;
  const auto say = [&](const std::string& why) {
    return c.key + " " + to_string(c.mode) + ": " + why + "; steps run eagerly";
  };
  if (!cuda_graphs_built()) {
    if (on) d.message = say("this build has no CUDA");
    return d;
  }
  if (!c.device.is_cuda()) {
    if (on) d.message = say("the device is " + c.device.str() + " (graphs need a CUDA device)");
    return d;
  }
  if (c.world_size > 1 && c.backend != "nccl") {
    d.message = say(std::to_string(c.world_size) + " ranks on the " +
                    (c.backend.empty() ? std::string("?") : c.backend) +
                    " backend: graphs take several ranks on NCCL only");
    return d;
  }
  if (!c.offload_policy.is(offload::Policy::Kind::kNone)) {
    d.message = say("offload policy '" + c.offload_policy.text +
                    "' moves and recomputes activations on the host's schedule");
    return d;
  }
  if (c.micro_batches > 1) {
    d.message = say(std::to_string(c.micro_batches) +
                    " micro-batches per step (a graph takes the step in one piece)");
    return d;
  }
  d.use = true;
  return d;
}

#ifdef FNO_CUDA_GRAPHS

class GraphPool {
 public:
  explicit GraphPool(c10::DeviceIndex device_index)
      : device(device_index),
        id(at::cuda::graph_pool_handle()),
        stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_index)) {}
  c10::DeviceIndex device;
  at::cuda::MempoolId_t id;
  // Warm-up runs and captures run here, as CUDA graphs must be captured off
  // the default stream; replays run on the caller's current stream.
  c10::cuda::CUDAStream stream;
  // The allocator's peak of allocated bytes after the latest capture.
  int64_t peak_bytes = 0;
};

namespace {

// Shapes, dtypes and devices of the inputs, as one key.
std::vector<int64_t> shape_key(const std::vector<at::Tensor>& inputs) {
  std::vector<int64_t> key;
  for (const auto& t : inputs) {
    key.push_back(t.dim());
    key.insert(key.end(), t.sizes().begin(), t.sizes().end());
    key.push_back(static_cast<int64_t>(t.scalar_type()));
  }
  return key;
}

// at::cuda::CUDAGraph that can clean up after a capture that failed. LibTorch
// 2.11's capture_end() checks cudaStreamEndCapture's result before it stops
// routing allocations (the device's and pinned host memory's) to the graph's
// pool and before it takes the RNG generators out of capture mode: after a failed capture the next
// capture threw "beginAllocateToPool: already recording to mempool_id" (fno_train exited) and the
// next random tensor "Offset increment outside graph capture encountered unexpectedly"
// (results/h200x2-2026-11-26-s11).
class Graph : public at::cuda::CUDAGraph {
 public:
  // After capture_begin(), the body or capture_end() having thrown: the
  // stream leaves capture mode, the pool stops taking allocations (the blocks
  // the capture took go back to it as their tensors die), the generators leave
  // capture mode. Each step is a no-op where capture_end() got past it.
  void end_failed() {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(capture_stream_.stream(), &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(capture_stream_.stream(), &partial) == cudaSuccess &&
          partial != nullptr) {
        (void)cudaGraphDestroy(partial);
      }
    }
    (void)cudaGetLastError();  // (a failed capture's error is not sticky)
    // The device's and the pinned host memory's allocators both route into
    // the pool during a capture (capture_begin began both).
    try {
      c10::cuda::CUDACachingAllocator::endAllocateToPool(capture_dev_, mempool_id_);
    } catch (const c10::Error&) {  // capture_end() had ended it
    }
    try {
      at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(mempool_id_);
    } catch (const c10::Error&) {
    }
    // CUDAGeneratorState::capture_epilogue() clears this flag and returns the
    // graph's offset increment; it is not exported from libtorch_cuda.
    for (auto& entry : captured_generator_states_) entry.first->capturing_ = false;
  }
};

}  // namespace

struct GraphedFunction::Impl {
  struct Entry {
    int64_t eager_runs = 0;
    bool eager_only = false;  // never captured (over the limit, or out of memory)
    std::unique_ptr<Graph> graph;
    std::vector<at::Tensor> inputs;   // static, on the device
    std::vector<at::Tensor> outputs;  // static, in the pool
  };
  Body body;
  c10::Device device{c10::kCPU};
  int64_t warmup = 1;
  std::shared_ptr<GraphPool> pool;
  std::map<std::vector<int64_t>, Entry> entries;
  int64_t graphs = 0;
  double limit_ms = 0;
  std::string note;

  static std::string shape_text(const std::vector<at::Tensor>& inputs) {
    std::ostringstream o;
    for (size_t i = 0; i < inputs.size(); ++i) o << (i ? ", " : "") << inputs[i].sizes();
    return o.str();
  }

  // The last warm-up run, timed (the GPU synchronized around it): over the
  // limit, its shape stays eager.
  std::vector<at::Tensor> timed_eager(Entry& e, const std::vector<at::Tensor>& inputs) {
    c10::cuda::device_synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    auto out = eager(inputs);
    c10::cuda::device_synchronize();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ms > limit_ms) {
      e.eager_only = true;
      std::ostringstream o;
      o << "CUDA graphs (auto): a step of inputs " << shape_text(inputs) << " takes " << std::fixed
        << std::setprecision(1) << ms << " ms (over " << limit_ms
        << " ms: bound by its kernels, not their launches); it runs eagerly";
      add_note(o.str());
    }
    return out;
  }

  void add_note(const std::string& line) { note += (note.empty() ? "" : "\n") + line; }

  // The side stream waits for the current one, and the other way round after.
  static void wait(const c10::cuda::CUDAStream& waiting, const c10::cuda::CUDAStream& on) {
    at::cuda::CUDAEvent event;
    event.record(on);
    event.block(waiting);
  }

  std::vector<at::Tensor> eager(const std::vector<at::Tensor>& inputs) {
    const c10::cuda::CUDAGuard device_guard(device);
    const auto current = c10::cuda::getCurrentCUDAStream(device.index());
    std::vector<at::Tensor> on_device;
    for (const auto& t : inputs) on_device.push_back(t.to(device, /*non_blocking=*/true));
    wait(pool->stream, current);
    std::vector<at::Tensor> out;
    {
      const c10::cuda::CUDAStreamGuard guard(pool->stream);
      out = body(on_device);
    }
    wait(current, pool->stream);
    // Made on the side stream, used on the current one: the allocator must
    // not hand their memory to the side stream's next run before that use.
    for (auto& t : out) {
      if (t.defined() && t.is_cuda()) t.record_stream(current);
    }
    return out;
  }

  // After a failure in the body: the capture ends (Graph::end_failed), the
  // graph is dropped.
  static void end_failed_capture(Graph& graph, Entry& e) {
    try {
      graph.capture_end();
    } catch (...) {
    }
    graph.end_failed();
    e.outputs.clear();
  }

  void capture(Entry& e, const std::vector<at::Tensor>& inputs) {
    const c10::cuda::CUDAGuard device_guard(device);
    const auto current = c10::cuda::getCurrentCUDAStream(device.index());
    // The static inputs, outside the pool (they live as long as the graph).
    e.inputs.clear();
    for (const auto& t : inputs) {
      e.inputs.push_back(at::empty(t.sizes(), t.options().device(device)));
      e.inputs.back().copy_(t, /*non_blocking=*/true);
    }
    wait(pool->stream, current);
    // The eager warm-ups' cached blocks go back to the driver, so that the
    // graphs' pool can take that memory: otherwise the step's memory is held
    // twice, once cached outside the pool and once in it.
    c10::cuda::CUDACachingAllocator::emptyCache();
    auto graph = std::make_unique<Graph>();
    {
      const c10::cuda::CUDAStreamGuard guard(pool->stream);
      // Thread-local: the checkpoint writer's thread may synchronize meanwhile.
      graph->capture_begin(pool->id, cudaStreamCaptureModeThreadLocal);
      std::string failure;
      try {
        e.outputs = body(e.inputs);
      } catch (const c10::OutOfMemoryError&) {
        end_failed_capture(*graph, e);
        throw;
      } catch (const std::exception& ex) {
        failure = ex.what();
      }
      if (failure.empty()) {
        try {
          graph->capture_end();
        } catch (const std::exception& ex) {
          failure = ex.what();
          graph->end_failed();
        }
      } else {
        end_failed_capture(*graph, e);
      }
      if (!failure.empty()) {
        e.outputs.clear();
        throw GraphCaptureError("CUDA graph capture failed: " +
                                failure.substr(0, failure.find('\n')));
      }
    }
    wait(current, pool->stream);
    // The pool's memory was allocated in the capture (and is reused by every
    // replay, which allocates nothing): the peak since the caller's last reset
    // covers it and the warm-up runs before it.
    pool->peak_bytes = std::max(
        pool->peak_bytes,
        static_cast<int64_t>(c10::cuda::CUDACachingAllocator::getDeviceStats(device.index())
                                 .allocated_bytes[0]
                                 .peak));
    e.graph = std::move(graph);
    ++graphs;
  }
};

GraphedFunction::GraphedFunction(Body body, c10::Device device, int64_t warmup,
                                 std::shared_ptr<GraphPool> pool)
    : p_(std::make_unique<Impl>()) {
  if (!device.is_cuda()) {
    throw std::invalid_argument("CUDA graphs need a CUDA device, got " + device.str());
  }
  if (device.index() < 0) device = c10::Device(c10::kCUDA, c10::cuda::current_device());
  if (pool && pool->device != device.index()) {
    throw std::invalid_argument("CUDA graphs: a pool of another device");
  }
  p_->body = std::move(body);
  p_->device = device;
  p_->warmup = std::max<int64_t>(1, warmup);
  p_->pool = pool ? std::move(pool) : std::make_shared<GraphPool>(device.index());
}

GraphedFunction::~GraphedFunction() = default;

std::vector<at::Tensor> GraphedFunction::run(const std::vector<at::Tensor>& inputs) {
  auto& p = *p_;
  auto& e = p.entries[shape_key(inputs)];
  if (e.eager_only) return p.eager(inputs);
  if (!e.graph) {
    if (e.eager_runs < p.warmup) {
      ++e.eager_runs;
      if (e.eager_runs == p.warmup && p.limit_ms > 0) return p.timed_eager(e, inputs);
      return p.eager(inputs);
    }
    try {
      p.capture(e, inputs);
    } catch (const c10::OutOfMemoryError& oom) {
      // Nothing of the step ran (a capture records): it runs eagerly instead.
      c10::cuda::CUDACachingAllocator::emptyCache();
      e.eager_only = true;
      const std::string what = oom.what_without_backtrace();
      p.add_note("CUDA graphs: capturing a step of inputs " + Impl::shape_text(inputs) +
                 " ran out of GPU memory (" + what.substr(0, what.find('\n')).substr(0, 160) +
                 "); it runs eagerly");
      return p.eager(inputs);
    }
  } else {
    for (size_t i = 0; i < inputs.size(); ++i) e.inputs[i].copy_(inputs[i], /*non_blocking=*/true);
  }
  const c10::cuda::CUDAGuard device_guard(p.device);
  e.graph->replay();
  return e.outputs;
}

std::vector<at::Tensor> GraphedFunction::run_eager(const std::vector<at::Tensor>& inputs) {
  return p_->eager(inputs);
}

void GraphedFunction::set_capture_limit_ms(double ms) { p_->limit_ms = std::max(0.0, ms); }

std::string GraphedFunction::take_note() { return std::exchange(p_->note, std::string()); }

bool GraphedFunction::captured(const std::vector<at::Tensor>& inputs) const {
  const auto it = p_->entries.find(shape_key(inputs));
  return it != p_->entries.end() && it->second.graph != nullptr;
}

int64_t GraphedFunction::graphs() const { return p_->graphs; }

int64_t GraphedFunction::peak_bytes() const { return p_->pool->peak_bytes; }

std::shared_ptr<GraphPool> GraphedFunction::pool() const { return p_->pool; }

#else  // no CUDA: nothing is captured

class GraphPool {};

struct GraphedFunction::Impl {};

GraphedFunction::GraphedFunction(Body, c10::Device, int64_t, std::shared_ptr<GraphPool>) {
  throw std::invalid_argument("CUDA graphs: this build has no CUDA");
}

GraphedFunction::~GraphedFunction() = default;

std::vector<at::Tensor> GraphedFunction::run(const std::vector<at::Tensor>&) { return {}; }

std::vector<at::Tensor> GraphedFunction::run_eager(const std::vector<at::Tensor>&) { return {}; }

void GraphedFunction::set_capture_limit_ms(double) {}

std::string GraphedFunction::take_note() { return {}; }

bool GraphedFunction::captured(const std::vector<at::Tensor>&) const { return false; }

int64_t GraphedFunction::graphs() const { return 0; }

int64_t GraphedFunction::peak_bytes() const { return 0; }

std::shared_ptr<GraphPool> GraphedFunction::pool() const { return nullptr; }

#endif

}  // namespace fno
