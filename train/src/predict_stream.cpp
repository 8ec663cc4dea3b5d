#include "predict_stream.h"

#include "stream_io.h"

#include <torch/torch.h>

#include <algorithm>
#include <optional>

namespace fno::detail {

StreamTimes predict_streamed(FNO model, const StreamedPlan& plan, const InputFiles& inputs,
                             int64_t first, int64_t n, const torch::Device& device,
                             const data::UnitGaussianNormalizer& in_norm,
                             const data::UnitGaussianNormalizer& out_norm,
                             data::Hdf5SampleWriter& writer, offload::Offloader* offloader,
                             const std::function<void(int64_t sample)>& on_tile,
                             std::vector<StreamedErrors::Values>* errors) {
  torch::NoGradGuard no_grad;
  const bool channels = model->options.out_channels() > 1;
  // One step for all samples: its host stores keep their pinned memory.
  const auto step = streamed_step(model, plan.plan, offloader);
  StreamTimes times;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = first + i;
    TileSource x;
    x.shape = inputs.x_shape();
    x.shape[0] = 1;
    x.options = torch::TensorOptions().device(device).dtype(torch::kFloat);
    // The input kept (plan.keep_input): [1, Cin, *S] on the host, filled by
    // the first sweep. Only the I/O thread touches it.
    torch::Tensor kept;
    int64_t kept_rows = 0;
    if (plan.keep_input) kept = torch::empty(x.shape, torch::kFloat);
    auto read = [&, s](int64_t r0, int64_t rows) {
      if (kept.defined() && r0 + rows <= kept_rows) return kept.narrow(2, r0, rows);
      auto tile = inputs.read_x(s, r0, r0 + rows);
      if (kept.defined() && r0 == kept_rows) {
        kept.narrow(2, r0, rows).copy_(tile);
        kept_rows = r0 + rows;
      }
      return tile;
    };
    // The sample's errors, from the truth's rows beside each output tile's
    // (only the I/O thread touches them until io.finish()).
    std::optional<StreamedErrors> sample_errors;
    if (errors != nullptr) sample_errors.emplace(x.shape[2]);
    // tile: [1, Cout, rows, *S'] decoded, on the host -> the file's rows [r0, r0 + rows)
    auto write = [&, s](int64_t r0, const at::Tensor& tile) {
      if (sample_errors) {  // (the truth's rows a few at a time: StreamedErrors::work_bytes)
        const int64_t rows = tile.size(2);
        const int64_t step =
            StreamedErrors::rows_at_once(tile.numel() / std::max<int64_t>(rows, 1));
        for (int64_t k = 0; k < rows; k += step) {
          const int64_t m = std::min(step, rows - k);
          sample_errors->add(r0 + k, tile.narrow(2, k, m), inputs.read_y(s, r0 + k, r0 + k + m));
        }
      }
      if (channels) {
        writer.write_rows("pred", s - first, 2, r0, tile);
      } else {
        writer.write_rows("pred", s - first, 1, r0, tile.squeeze(1));
      }
    };
    StreamIo io(read, write, x.shape[2], device.is_cuda());
    x.rows = [&](int64_t r0, int64_t rows) {
      const auto tile = io.rows(r0, rows).to(device, /*non_blocking=*/true);
      return normalize_rows(in_norm, tile, r0, /*inverse=*/false);
    };
    TileSink out = [&](int64_t r0, const at::Tensor& tile) {
      io.put(r0, normalize_rows(out_norm, tile.to(torch::kFloat), r0, /*inverse=*/true));
    };
    if (on_tile) {  // (progress: each tile read and each tile written)
      x.rows = [rows = std::move(x.rows), &on_tile, i](int64_t r0, int64_t k) {
        auto tile = rows(r0, k);
        on_tile(i);
        return tile;
      };
      out = [sink = std::move(out), &on_tile, i](int64_t r0, const at::Tensor& tile) {
        sink(r0, tile);
        on_tile(i);
      };
    }
    step->forward(x, out);
    io.finish();
    times += io.times();
    if (sample_errors) errors->push_back(sample_errors->finish());
  }
  return times;
}

torch::Tensor normalize_rows(const data::UnitGaussianNormalizer& norm, const torch::Tensor& x,
                             int64_t r0, bool inverse) {
  if (!norm.fitted()) return x;
  auto mean = norm.mean(), sd = norm.std();
  if (norm.mode() == data::NormalizerMode::kPointwise) {
    mean = mean.narrow(2, r0, x.size(2));
    sd = sd.narrow(2, r0, x.size(2));
  }
  return inverse ? x * (sd + norm.eps()) + mean : (x - mean) / (sd + norm.eps());
}

}  // namespace fno::detail
