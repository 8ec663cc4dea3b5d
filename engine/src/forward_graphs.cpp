// CUDA graphs of a forward under a plan (fno_engine/forward_graphs.h).
#include <fno_engine/forward_graphs.h>

#include <fno_engine/forward_plan.h>

#include <torch/torch.h>

#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace fno {

struct ForwardGraphs::Impl {
  FNO model{nullptr};
  std::unique_ptr<GraphedFunction> fn;
  bool failed = false;  // a capture failed: every forward runs eagerly
  std::string notes;
  int64_t replayed = 0, eager = 0;

  // GraphedFunction's lines, which speak of steps, reworded for a forward:
  // "CUDA graphs (auto): a step of inputs [...] takes ..." -> "a forward of [...] takes ...".
  void note(std::string line) {
    if (line.empty()) return;
    for (const std::string step : {"CUDA graphs (auto): a step of inputs ", "a step of inputs "}) {
      for (size_t at = line.find(step); at != std::string::npos; at = line.find(step, at)) {
        line.replace(at, step.size(), "a forward of ");
      }
    }
    for (size_t at = line.find('\n'); at != std::string::npos; at = line.find('\n', at)) {
      line.replace(at, 1, "; ");  // (one line per shape)
    }
    notes += "; " + line;
  }
  // x: [b, Cin, *S] -> [b, Cout, *S]
  at::Tensor eager_forward(const at::Tensor& x) {
    torch::NoGradGuard no_grad;
    ++eager;
    return model->forward(x);
  }
};

ForwardGraphs::ForwardGraphs(FNO model, c10::Device device, CudaGraphs mode)
    : p_(std::make_unique<Impl>()) {
  if (mode == CudaGraphs::kOff) {
    throw std::invalid_argument("ForwardGraphs: CUDA graphs are off");
  }
  p_->model = model;
  // auto: one warm-up forward for the set-up (FFT plans, workspaces), then a
  // timed one that decides; on: the set-up alone.
  const int64_t warmup = mode == CudaGraphs::kAuto ? 2 : 1;
  p_->fn = std::make_unique<GraphedFunction>(
      [model](const std::vector<at::Tensor>& in) mutable {
        torch::NoGradGuard no_grad;  // (thread-local: the body runs on the caller's thread)
        // in[0]: [b, Cin, *S] -> [b, Cout, *S]
        return std::vector<at::Tensor>{model->forward(in.at(0))};
      },
      device, warmup);
  if (mode == CudaGraphs::kAuto) p_->fn->set_capture_limit_ms(kAutoForwardGraphLimitMs);
}

ForwardGraphs::~ForwardGraphs() = default;

at::Tensor ForwardGraphs::forward(const at::Tensor& x) {
  auto& p = *p_;
  if (p.failed) return p.eager_forward(x);
  std::vector<at::Tensor> out;
  try {
    out = p.fn->run({x});
  } catch (const GraphCaptureError& e) {
    p.failed = true;
    p.note(std::string(e.what()) + "; the forward runs eagerly");
    return p.eager_forward(x);
  }
  p.note(p.fn->take_note());
  if (p.fn->captured({x})) {
    ++p.replayed;
    return out.at(0).clone();  // the graph's static output is overwritten by its next replay
  }
  ++p.eager;
  return out.at(0);
}

int64_t ForwardGraphs::replayed() const { return p_->replayed; }

int64_t ForwardGraphs::eager() const { return p_->eager; }

int64_t ForwardGraphs::graphs() const { return p_->fn->graphs(); }

std::string ForwardGraphs::summary() const {
  std::ostringstream o;
  o << "CUDA graphs: " << graphs() << " captured, " << p_->replayed << " of "
    << p_->replayed + p_->eager << " forwards replayed" << p_->notes;
  return o.str();
}

std::unique_ptr<ForwardGraphs> use_forward_graphs(FNO model, ForwardPlan& plan, CudaGraphs mode,
                                                  const c10::Device& device) {
  plan.graphed = false;
  if (mode == CudaGraphs::kOff) {
    if (device.is_cuda()) plan.text += "; CUDA graphs off";
    return nullptr;
  }
  std::string why;
  if (!cuda_graphs_built()) {
    why = "this build has no CUDA";
  } else if (!device.is_cuda()) {
    why = "the device is " + device.str() + " (graphs need a CUDA device)";
  } else if (plan.tiled) {
    why = "a tiled forward runs eagerly";
  }
  if (!why.empty()) {
    if (mode == CudaGraphs::kOn || device.is_cuda()) {
      plan.text += "; CUDA graphs " + to_string(mode) + ", not used: " + why;
    }
    return nullptr;
  }
  std::ostringstream o;
  o << "; CUDA graphs " << to_string(mode);
  if (mode == CudaGraphs::kAuto) {
    o << " (a micro-batch shape whose forward takes at most " << std::fixed << std::setprecision(0)
      << kAutoForwardGraphLimitMs << " ms)";
  }
  plan.text += o.str();
  plan.graphed = true;
  return std::make_unique<ForwardGraphs>(std::move(model), device, mode);
}

std::string streamed_graphs_text(CudaGraphs mode) {
  return mode == CudaGraphs::kOn ? "; CUDA graphs on, not used: a streamed forward runs in tiles"
                                 : "";
}

}  // namespace fno
