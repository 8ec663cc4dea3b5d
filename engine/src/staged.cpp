#include <fno_engine/staged.h>

#include <torch/torch.h>

namespace fno {

std::vector<offload::Stage> fno_stages(FNO model, std::vector<int64_t> spatial) {
  TORCH_CHECK(static_cast<int64_t>(spatial.size()) == model->n_dim(),
              "fno_stages: ", model->n_dim(), "-d FNO, but ", spatial.size(), " spatial sizes");
  const std::shared_ptr<FNOImpl> m = model.ptr();
  using Fn = std::function<at::Tensor(const at::Tensor&)>;
  // The same function storing only what is expensive to recompute (fno/layers.h).
  const auto slim = [](Fn fn) -> Fn {
    return [fn](const at::Tensor& x) {
      RecomputeCheapGuard guard;
      return fn(x);
    };
  };
  std::vector<offload::Stage> stages;
  const auto add = [&](std::string name, Fn fn) {
    offload::Stage s;
    s.name = std::move(name);
    s.fn = fn;
    s.chunkable = true;
    s.fn_slim = slim(fn);
    stages.push_back(std::move(s));
  };
  // x: [B, Cin, *S] -> [B, hidden, *S']
  add("lifting", [m](const at::Tensor& x) { return m->forward_lift(x); });
  for (int64_t i = 0; i < model->options.n_layers(); ++i) {
    // x: [B, hidden, *S'] -> [B, hidden, *S'] (pre-activations between blocks)
    add("block." + std::to_string(i),
        [m, i](const at::Tensor& x) { return m->forward_block(x, i); });
  }
  // x: [B, hidden, *S'] -> [B, Cout, *S]
  add("projection", [m, spatial](const at::Tensor& x) { return m->forward_project(x, spatial); });
  return stages;
}

}  // namespace fno
