// CUDA graphs for the training step and evaluation (issue 28). On small grids
// a step is bound by its kernel launches: a few hundred kernels of a few
// microseconds each, launched one by one from the host. A CUDA graph records
// them once and launches them all at once afterwards.
//
//   GraphedFunction f(body, warmup, pool);
//   const auto out = f.run({x, y});  // one graph per shape of (x, y)
//
// run() copies its inputs into static buffers of their shapes and replays
// that shape's graph; the first `warmup` calls of a shape run `body` eagerly
// on the graphs' side stream (cuFFT plans, cuBLAS workspaces, lazily made
// state), the next captures it there (LibTorch's at::cuda::CUDAGraph) and
// replays. All graphs of a pool share one memory pool: their temporaries
// overlap, so a graph's outputs hold until the next replay of any graph of
// the pool. What a captured body must respect:
//   - no host reads of tensor values (.item(), nonzero, a TORCH_CHECK on
//     values), no synchronization, no host-to-device copies from pageable memory;
//   - every tensor it reads outside its inputs (weights, optimizer state,
//     cached grids and DFT matrices, normalizers) stays alive at the same
//     address while the graph lives: update such state in place;
//   - numbers that change between replays (the learning rate, the loss
//     scale) live in device tensors; host numbers are frozen into the graph;
//   - state it creates (moments, accumulators) is created in the eager runs
//     before the capture, outside the graphs' memory pool.
// Without CUDA (a CPU device, or a build without CUDA) nothing is captured:
// decide_cuda_graphs() says so, and GraphedFunction refuses to be made.
#pragma once

#include <fno_offload/planner.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace fno {

/// training.cuda_graphs and fno_bench --cuda-graphs.
enum class CudaGraphs { kAuto, kOn, kOff };
/// "auto", "on", "off".
std::string to_string(CudaGraphs mode);
/// "auto" | "on" | "off"; anything else throws std::invalid_argument naming it.
CudaGraphs parse_cuda_graphs(const std::string& text);

/// Whether this build can capture CUDA graphs (a CUDA LibTorch).
bool cuda_graphs_built();

/// What decides whether a run's steps are captured.
struct GraphConditions {
  CudaGraphs mode = CudaGraphs::kAuto;
  /// The setting's name in messages: "training.cuda_graphs", "--cuda-graphs".
  std::string key = "training.cuda_graphs";
  c10::Device device{c10::kCPU};
  /// The offload policy and the fixed policies' micro-batches.
  offload::Policy offload_policy;
  int64_t micro_batches = 1;
  /// Ranks (torchrun), and their c10d backend ("nccl", "gloo"; "" alone).
  int64_t world_size = 1;
  std::string backend;
};

struct GraphDecision {
  /// Capture the steps.
  bool use = false;
  /// When not: the one line that says why, to be logged once; "" when no line
  /// is due (off; auto on a CPU device or without a CUDA build).
  std::string message;
};

/// auto captures where graphs work: a CUDA device, offload policy none with
/// one micro-batch, one rank or several on NCCL (two graphs a step, the
/// gradient all-reduce between them; the recurrent rollout included);
/// otherwise the steps run eagerly, with one line when `on` was asked for, or
/// when auto meets an offload policy or several ranks on another backend.
GraphDecision decide_cuda_graphs(const GraphConditions& conditions);

/// training.cuda_graphs auto captures a shape only when its last eager warm-up
/// step took at most this long per application of the model (fno_train gives a
/// recurrent rollout of T steps T times it): longer steps are bound by their
/// kernels, not their launches (a graph saves a few milliseconds of launches a
/// step), and a graph's memory pool would hold the step's memory beside the
/// eager cache.
constexpr double kAutoGraphLimitMs = 50.0;

/// The memory pool and side stream the graphs of one run share.
class GraphPool;

/// A capture that failed (an operation a graph cannot hold); the caller may
/// go on eagerly. Out of memory during a capture stays c10::OutOfMemoryError.
class GraphCaptureError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A function of tensors, run as one CUDA graph per shape of its inputs (the
/// header says how). CUDA only: the constructor throws std::invalid_argument
/// on a build without CUDA or for a device that is not a CUDA device.
class GraphedFunction {
 public:
  /// `body(inputs)` computes on the current stream and returns its outputs
  /// (possibly none), tensors on the device. Its inputs are on `device`
  /// (static buffers there); run() takes them from anywhere.
  using Body = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;
  /// `warmup`: eager calls of each shape before its capture (at least 1).
  /// `pool`: share another function's pool and side stream (null: a new one).
  GraphedFunction(Body body, c10::Device device, int64_t warmup,
                  std::shared_ptr<GraphPool> pool = nullptr);
  ~GraphedFunction();
  GraphedFunction(const GraphedFunction&) = delete;
  GraphedFunction& operator=(const GraphedFunction&) = delete;

  /// body(inputs): eagerly during the warm-up of their shapes, else by
  /// copying them into the static inputs and replaying; the outputs of a
  /// replay are the graph's static outputs, valid until the pool's next replay.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs);
  /// body(inputs) eagerly on the side stream, outside the warm-up count (a
  /// step whose memory timeline is recorded).
  std::vector<at::Tensor> run_eager(const std::vector<at::Tensor>& inputs);
  /// Shapes whose last warm-up run took longer than `ms` (host time, the GPU
  /// synchronized around it) are not captured: they run eagerly from then on
  /// (auto: kAutoGraphLimitMs). 0: every shape is captured.
  void set_capture_limit_ms(double ms);
  /// Why a shape runs eagerly after all (over the capture limit, or its
  /// capture ran out of memory): one line per such shape, once; "" when
  /// nothing new. A capture that runs out of memory leaves its shape eager.
  std::string take_note();
  /// Whether run(inputs) replays a captured graph.
  bool captured(const std::vector<at::Tensor>& inputs) const;
  /// The graphs captured so far.
  int64_t graphs() const;
  /// The GPU memory the pool's graphs need: the allocator's peak of
  /// allocated bytes read after each capture of the pool (a replay allocates
  /// nothing, so the peak the allocator reports over replays leaves it out).
  int64_t peak_bytes() const;
  std::shared_ptr<GraphPool> pool() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

}  // namespace fno
