#include <fno/fno.h>

#include <torch/torch.h>

#include <iostream>

int main() {
  fno::FNO model(fno::FNOOptions({16, 16}, 1, 1, 32).projection_channel_ratio(2));
  auto y = model->forward(torch::randn({1, 1, 16, 16}));
  std::cout << "n_params " << fno::count_params(*model) << " output " << y.sizes() << "\n";
  return fno::count_params(*model) == 1192801 ? 0 : 1;
}
