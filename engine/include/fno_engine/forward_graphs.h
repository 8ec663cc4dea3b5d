// CUDA graphs of a forward under a plan (fno_predict --cuda-graphs, issue 49).
// A forward of a small grid is bound by its kernel launches (many kernels of
// a few microseconds each, launched one by one from the host); replayed as one
// CUDA graph, they launch at once. Prediction runs the same micro-batch
// shape again and again (batch after batch, and the steps of a rollout), so
// each shape is captured once and replayed:
//
//   auto graphs = use_forward_graphs(model, plan, CudaGraphs::kAuto, device);
//   const auto y = forward_under_plan(model, plan, x, tiles, graphs.get());
//
// Through GraphedFunction (graphed_step.h): a shape's first forwards run
// eagerly on the graphs' side stream (the warm-up: FFT plans, workspaces),
// the next is captured in the graphs' private memory pool and replayed, and
// so is every later one of that shape; a shape seen once (the last, partial
// batch) runs eagerly. auto captures a shape only when its timed warm-up
// forward takes at most kAutoForwardGraphLimitMs (larger grids are bound by
// their kernels, and a graph saves nothing but holds its memory beside the
// eager cache); on captures every shape seen twice. A capture that fails
// leaves the forward eager, said once in summary(). The output of a graphed
// forward is a copy of the graph's static output (a rollout feeds each
// output back as the next input), bit for bit the eager forward's.
// Tiled plans run eagerly (their host copies and per-tile work do not fit a
// graph), and so does every forward on the CPU.
#pragma once

#include <fno/fno.h>
#include <fno_engine/graphed_step.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

namespace fno {

struct ForwardPlan;

/// auto's measured rule: a micro-batch shape is captured only when its last
/// eager warm-up forward took at most this long (the GPU synchronized around
/// it). The launches a graph saves take well under a millisecond a forward of
/// the seed model; past this they are under a few percent of it.
constexpr double kAutoForwardGraphLimitMs = 20.0;

/// The whole-grid forwards of a plan as CUDA graphs, one per micro-batch shape.
class ForwardGraphs {
 public:
  /// `mode`: kOn (every shape seen twice is captured) or kAuto (those whose
  /// warm-up forward takes at most kAutoForwardGraphLimitMs). Throws
  /// std::invalid_argument without CUDA or for kOff (GraphedFunction's
  /// refusals).
  ForwardGraphs(FNO model, c10::Device device, CudaGraphs mode);
  ~ForwardGraphs();
  ForwardGraphs(const ForwardGraphs&) = delete;
  ForwardGraphs& operator=(const ForwardGraphs&) = delete;

  /// model(x) without gradients: eagerly during a shape's warm-up (or for
  /// good after a failed capture), else by replaying the shape's graph; a
  /// tensor of its own either way.
  // x: [b, Cin, *S] -> [b, Cout, *S]
  at::Tensor forward(const at::Tensor& x);
  /// Forwards replayed from a graph, run eagerly, and graphs captured so far.
  int64_t replayed() const;
  int64_t eager() const;
  int64_t graphs() const;
  /// One line: "CUDA graphs: 1 captured, 14 of 16 forwards replayed" and
  /// what kept shapes eager (over auto's limit, a failed capture).
  std::string summary() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

/// Whether a forward under `plan` on `device` runs as CUDA graphs for `mode`
/// (fno_predict --cuda-graphs): auto and on take a CUDA device with a CUDA
/// build and a whole-grid plan. plan.text gets the decision on a CUDA device
/// ("; CUDA graphs auto (...)", "; CUDA graphs off"), and with on wherever
/// they cannot be used ("; CUDA graphs on, not used: <why>"); on the CPU with
/// auto or off it is left as it is. Returns the runner (null: eager).
std::unique_ptr<ForwardGraphs> use_forward_graphs(FNO model, ForwardPlan& plan, CudaGraphs mode,
                                                  const c10::Device& device);

/// The same for a streamed forward (tiles, never graphed): what its plan line
/// adds ("" unless `mode` is on).
std::string streamed_graphs_text(CudaGraphs mode);

}  // namespace fno
