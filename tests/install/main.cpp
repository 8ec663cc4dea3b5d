#include <fno/fno.h>
#include <fno_train/config.h>

#include <torch/torch.h>

#include <iostream>

int main() {
  // The model library (fno::fno) and the training floor (fno::train), as installed.
  const auto cfg = fno::parse_config("model: {n_modes: [16, 16], hidden_channels: 32}\ndata: {train_file: x.pt}\n", "inline");
  fno::FNO model(fno::FNOOptions(cfg.model).projection_channel_ratio(2));
  auto y = model->forward(torch::randn({1, 1, 16, 16}));
  std::cout << "n_params " << fno::count_params(*model) << " output " << y.sizes() << "\n";
  return fno::count_params(*model) == 1192801 ? 0 : 1;
}
