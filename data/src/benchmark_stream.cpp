// Windows of a benchmark split read on demand (fno_data/benchmark_stream.h).
#include <fno_data/benchmark_stream.h>

#include <torch/torch.h>

#include <algorithm>
#include <map>

namespace fno::data {

std::pair<std::vector<int64_t>, std::vector<int64_t>> window_shapes(const BenchmarkSet& set,
                                                                    int64_t n) {
  const auto& o = set.options();
  const int64_t tv = set.n_time_varying_inputs();
  const auto n_in = static_cast<int64_t>(set.input_field_channels().size());
  const auto n_out = static_cast<int64_t>(set.target_field_channels().size());
  std::vector<int64_t> x{n, o.history() * tv + (n_in - tv)}, y{n, o.horizon() * n_out};
  const auto grid = set.read_grid();  // (select_rows: its rows alone)
  x.insert(x.end(), grid.begin(), grid.end());
  y.insert(y.end(), grid.begin(), grid.end());
  return {x, y};
}

void read_windows_into(const BenchmarkSet& set, const std::vector<int64_t>& indices,
                       torch::Tensor& x, torch::Tensor& y) {
  const auto n = static_cast<int64_t>(indices.size());
  const auto [xs, ys] = window_shapes(set, n);
  TORCH_CHECK(x.sizes() == torch::IntArrayRef(xs) && y.sizes() == torch::IntArrayRef(ys) &&
                  x.is_contiguous() && y.is_contiguous() && x.scalar_type() == torch::kFloat &&
                  y.scalar_type() == torch::kFloat,
              "read_windows_into: x ", x.sizes(), " and y ", y.sizes(), " for ", n,
              " windows must be contiguous float32 ", torch::IntArrayRef(xs), " and ",
              torch::IntArrayRef(ys));
  const int64_t h = set.options().history(), f = set.options().horizon();
  const int64_t span = h + f;  // the steps a window spans
  const int64_t n_tv = h * set.n_time_varying_inputs();
  torch::NoGradGuard no_grad;
  // By trajectory, then start step: (start, row of x and y).
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> by_trajectory;
  for (int64_t i = 0; i < n; ++i) {
    const auto [traj, start] = set.window_at(indices[static_cast<size_t>(i)]);
    by_trajectory[traj].emplace_back(start, i);
  }
  for (auto& [traj, windows] : by_trajectory) {
    std::sort(windows.begin(), windows.end());
    const auto constant = set.read_constant(traj);  // [F_const, *S]
    for (size_t a = 0; a < windows.size();) {
      // A run of windows whose steps overlap: one read of their steps.
      size_t b = a + 1;
      while (b < windows.size() && windows[b].first < windows[b - 1].first + span) ++b;
      const int64_t s0 = windows[a].first, s1 = windows[b - 1].first + 1;
      const auto in = set.read_steps(traj, s0, s1 - 1 + h, false);  // [s1 - s0 - 1 + h, F, *S]
      const auto out =
          set.read_steps(traj, s0 + h, s1 - 1 + span, true);  // [s1 - s0 - 1 + f, F_out, *S]
      for (size_t k = a; k < b; ++k) {
        const auto [s, row] = windows[k];
        auto xr = x[row];
        xr.narrow(0, 0, n_tv).copy_(in.narrow(0, s - s0, h).flatten(0, 1));
        if (constant.size(0) > 0) xr.narrow(0, n_tv, constant.size(0)).copy_(constant);
        y[row].copy_(out.narrow(0, s - s0, f).flatten(0, 1));
      }
      a = b;
    }
  }
}

FieldPairs read_windows(const BenchmarkSet& set, const std::vector<int64_t>& indices) {
  const auto [xs, ys] = window_shapes(set, static_cast<int64_t>(indices.size()));
  FieldPairs p{torch::empty(xs), torch::empty(ys)};
  read_windows_into(set, indices, p.x, p.y);
  return p;
}

namespace {

// Chan's parallel update of a running mean and sum of squared deviations
// (float64) by a chunk of samples [m, ...].
struct Moments {
  torch::Tensor mean, m2;
  double count = 0;
  void add(const torch::Tensor& chunk) {
    const auto v = chunk.to(torch::kDouble);
    const double m = static_cast<double>(v.size(0));
    const auto cm = v.mean(0, /*keepdim=*/true);
    const auto cm2 = (v - cm).pow(2).sum(0, /*keepdim=*/true);
    if (count == 0) {
      mean = cm;
      m2 = cm2;
    } else {
      const auto delta = cm - mean;
      const double total = count + m;
      mean = mean + delta * (m / total);
      m2 = m2 + cm2 + delta.pow(2) * (count * m / total);
    }
    count += m;
  }
  std::pair<torch::Tensor, torch::Tensor> result() const {
    return {mean.to(torch::kFloat), (m2 / std::max(count - 1, 1.0)).sqrt().to(torch::kFloat)};
  }
};

}  // namespace

WindowStats pointwise_window_stats(const BenchmarkSet& set, int64_t chunk) {
  TORCH_CHECK(chunk >= 1, "pointwise_window_stats: chunk must be >= 1, got ", chunk);
  const int64_t n = set.n_windows();
  if (n < 2) {
    throw std::invalid_argument(
        "pointwise normalization needs at least 2 training samples (a std per grid point), got " +
        std::to_string(n));
  }
  Moments mx, my;
  for (int64_t w0 = 0; w0 < n; w0 += chunk) {
    const int64_t w1 = std::min(n, w0 + chunk);
    const auto p = set.windows(w0, w1);  // consecutive windows: one read per trajectory
    mx.add(p.x);
    my.add(p.y);
  }
  WindowStats s;
  std::tie(s.x_mean, s.x_std) = mx.result();
  std::tie(s.y_mean, s.y_std) = my.result();
  return s;
}

}  // namespace fno::data
