#include <fno/staged.h>

#include <torch/torch.h>

namespace fno {

std::vector<offload::Stage> fno_stages(FNO model, std::vector<int64_t> spatial) {
  TORCH_CHECK(static_cast<int64_t>(spatial.size()) == model->n_dim(),
              "fno_stages: ", model->n_dim(), "-d FNO, but ", spatial.size(), " spatial sizes");
  const std::shared_ptr<FNOImpl> m = model.ptr();
  std::vector<offload::Stage> stages;
  // x: [B, Cin, *S] -> [B, hidden, *S']
  stages.push_back({"lifting", [m](const at::Tensor& x) { return m->forward_lift(x); }, true});
  for (int64_t i = 0; i < model->options.n_layers(); ++i) {
    // x: [B, hidden, *S'] -> [B, hidden, *S']
    stages.push_back({"block." + std::to_string(i),
                      [m, i](const at::Tensor& x) { return m->forward_block(x, i); }, true});
  }
  // x: [B, hidden, *S'] -> [B, Cout, *S]
  stages.push_back({"projection",
                    [m, spatial](const at::Tensor& x) { return m->forward_project(x, spatial); },
                    true});
  return stages;
}

}  // namespace fno
