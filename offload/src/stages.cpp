// Recompute (checkpointing) as an autograd node, and the stage runner.
#include <fno_offload/offload.h>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/autograd/variable.h>

#include <ATen/ATen.h>

#include <optional>
#include <sstream>

namespace fno::offload {
namespace {

// Backward of checkpoint(): reload the input (through the offload hooks),
// recompute the stage with grad, backpropagate through it. Parameter gradients
// accumulate into .grad by the nested backward, as torch.utils.checkpoint's
// reentrant variant does.
struct CheckpointBackward final : public torch::autograd::Node {
  std::function<at::Tensor(const at::Tensor&)> fn;
  torch::autograd::SavedVariable input;
  bool input_requires_grad = false;
  Offloader* offloader = nullptr;

  std::string name() const override { return "fno::offload::CheckpointBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    const auto x = input.unpack();
    auto xd = x.detach();
    if (input_requires_grad) xd.requires_grad_(true);
    at::Tensor y;
    {
      // What the recompute saves is used at once: keep it on the GPU.
      std::optional<Scope> scope;
      if (offloader != nullptr) {
        scope.emplace(offloader, "recompute", Level::kKeep, ScopeOptions().same_stage(true));
      }
      at::AutoGradMode enable(true);
      y = fn(xd);
    }
    if (grads[0].defined() && y.requires_grad()) {
      // Backpropagate from y's graph without keeping y itself: its memory (a
      // stage output) is not needed by the backward of the ops that made it.
      auto root = torch::autograd::impl::gradient_edge(y);
      y = at::Tensor();
      torch::autograd::Engine::get_default_engine().execute({root}, {grads[0]},
                                                            /*keep_graph=*/false,
                                                            /*create_graph=*/false,
                                                            /*accumulate_grad=*/true);
    }
    return {input_requires_grad ? xd.grad() : at::Tensor()};
  }

  void release_variables() override { input.reset_data(); }
};

}  // namespace

at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x,
                      Offloader* offloader) {
  TORCH_CHECK(fn, "fno offload: checkpoint needs a function");
  if (!at::GradMode::is_enabled()) return fn(x);
  at::Tensor y;
  {
    at::NoGradGuard no_grad;
    y = fn(x).detach();  // a fresh tensor, never a view, to hang the node on
  }
  TORCH_CHECK(at::isFloatingType(y.scalar_type()) || at::isComplexType(y.scalar_type()),
              "fno offload: checkpoint output must be floating point, got ", y.scalar_type());
  std::shared_ptr<CheckpointBackward> node(new CheckpointBackward(), torch::autograd::deleteNode);
  node->fn = fn;
  node->offloader = offloader;
  node->input_requires_grad = x.requires_grad();
  node->set_next_edges(torch::autograd::collect_next_edges(x));
  node->input = torch::autograd::SavedVariable(x, /*is_output=*/false);
  torch::autograd::set_history(y, node);
  return y;
}

std::vector<int64_t> split_sizes(int64_t batch, int64_t parts) {
  TORCH_CHECK(parts >= 1 && parts <= batch, "fno offload: ", parts, " slices of a batch of ",
              batch);
  std::vector<int64_t> sizes(static_cast<size_t>(parts), batch / parts);
  for (int64_t c = 0; c < batch % parts; ++c) ++sizes[static_cast<size_t>(c)];
  return sizes;
}

std::string Plan::to_string(const std::vector<Stage>& stage_list) const {
  std::ostringstream o;
  if (micro_batches > 1) o << "micro_batches=" << micro_batches << "; ";
  for (size_t i = 0; i < stages.size(); ++i) {
    if (i > 0) o << ", ";
    o << (i < stage_list.size() ? stage_list[i].name : "stage" + std::to_string(i)) << '='
      << fno::offload::to_string(stages[i].level);
    if (stages[i].chunks > 1) o << '/' << stages[i].chunks;
  }
  return o.str();
}

at::Tensor run_stages(const std::vector<Stage>& stages, const Plan& plan, at::Tensor x,
                      Offloader* offloader) {
  TORCH_CHECK(plan.stages.size() == stages.size(), "fno offload: the plan has ", plan.stages.size(),
              " entries for ", stages.size(), " stages");
  for (size_t i = 0; i < stages.size(); ++i) {
    const auto& stage = stages[i];
    const auto& sp = plan.stages[i];
    TORCH_CHECK(sp.chunks >= 1, "fno offload: stage ", stage.name, ": chunks must be >= 1, got ",
                sp.chunks);
    TORCH_CHECK(sp.chunks == 1 || stage.chunkable, "fno offload: stage ", stage.name,
                " cannot run in chunks of the batch (asked for ", sp.chunks, ")");
    // Chunks of one stage are one stage to the prefetcher; the last chunk of
    // the last stage keeps what it saves on the GPU for the turn to backward.
    int64_t stage_number = 0;
    auto run_one = [&](const at::Tensor& in, const std::string& name, int64_t chunk) {
      std::optional<Scope> scope;
      if (offloader != nullptr) {
        scope.emplace(offloader, name, sp.level,
                      ScopeOptions().same_stage(chunk > 0).last(i + 1 == stages.size() &&
                                                                chunk + 1 == sp.chunks));
        if (chunk == 0) stage_number = scope->stage();
      }
      const auto& fn = stage.fn_at(sp.level);
      return recomputes(sp.level) ? checkpoint(fn, in, offloader) : fn(in);
    };
    at::Tensor y;
    if (sp.chunks > 1) {
      // x: [B, ...] -> chunks of [B/chunks, ...] (the first ones one larger when uneven)
      const int64_t dim = 0;
      TORCH_CHECK(x.dim() >= 1 && x.size(0) >= sp.chunks, "fno offload: stage ", stage.name, ": ",
                  sp.chunks, " chunks of a batch of ", x.dim() >= 1 ? x.size(0) : 0);
      std::vector<at::Tensor> outs;
      // split (not tensor_split): one backward node that concatenates the
      // chunks' gradients once, where per-chunk slices would each expand to a
      // zero-filled full-size gradient.
      const auto parts = x.split_with_sizes(split_sizes(x.size(dim), sp.chunks), dim);
      for (size_t c = 0; c < parts.size(); ++c) {
        outs.push_back(
            run_one(parts[c], stage.name + "#" + std::to_string(c), static_cast<int64_t>(c)));
      }
      y = at::cat(outs, dim);
    } else {
      y = run_one(x, stage.name, 0);
    }
    if (offloader != nullptr && y.requires_grad()) {
      // Fires as backward reaches this stage: the prefetch window moves on.
      const std::string name = stage.name;
      y.register_hook([offloader, name, stage_number](const at::Tensor&) {
        offloader->mark("backward " + name);
        offloader->backward_reaches(stage_number);
      });
    }
    x = std::move(y);
  }
  return x;
}

}  // namespace fno::offload
