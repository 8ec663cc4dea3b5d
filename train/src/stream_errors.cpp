#include "stream_errors.h"

#include <fno/losses.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace fno::detail {

namespace {

// The sum of t^2 over every dim but the channels'.
// t: [1, C, ...] -> [C]
at::Tensor square_sum(const at::Tensor& t) { return t.pow(2).flatten(2).sum(-1).select(0, 0); }

std::string sizes_text(const at::Tensor& t) {
  std::string s;
  for (const auto v : t.sizes()) s += (s.empty() ? "" : "x") + std::to_string(v);
  return s;
}

}  // namespace

StreamedErrors::StreamedErrors(int64_t grid_rows) : grid_rows_(grid_rows) {
  if (grid_rows < 1) {
    throw std::invalid_argument("streamed errors: grid_rows must be >= 1, got " +
                                std::to_string(grid_rows));
  }
}

void StreamedErrors::add(int64_t r0, const at::Tensor& pred, const at::Tensor& truth) {
  const bool shaped = pred.dim() >= 3 && pred.size(0) == 1 && pred.sizes() == truth.sizes();
  if (!shaped || r0 != next_row_ || r0 + pred.size(2) > grid_rows_) {
    throw std::runtime_error("streamed errors: rows from " + std::to_string(r0) + " (prediction " +
                             sizes_text(pred) + ", truth " + sizes_text(truth) + ") after " +
                             std::to_string(next_row_) + " of " + std::to_string(grid_rows_) +
                             " rows");
  }
  const int64_t n = pred.size(2), c = pred.size(1), d = pred.dim() - 2;
  const auto y = truth.to(torch::kDouble);
  const auto e = pred.to(torch::kDouble) - y;
  if (!e2_.defined()) {
    for (auto* t : {&e2_, &y2_, &de2_, &dy2_}) *t = torch::zeros({c}, torch::kDouble);
  }
  e2_ += square_sum(e);
  y2_ += square_sum(y);
  // The dims after the rows lie whole in each tile: H1Loss's differences
  // (periodic, step 1 / size).
  for (int64_t j = 1; j < d; ++j) {
    const int64_t dim = 2 + j;
    const double h = 1.0 / static_cast<double>(e.size(dim));
    de2_ += square_sum(finite_diff_first(e, dim, h, /*periodic=*/true));
    dy2_ += square_sum(finite_diff_first(y, dim, h, /*periodic=*/true));
  }
  // Along the rows: the central differences of every row whose two
  // neighbours are known now, rows [r0 - 1, r0 + n - 2] (the tail holds rows
  // r0 - 2 and r0 - 1); rows 0 and grid_rows - 1 wait for finish().
  // both: [1, 2C, n, *S'] (e, then y)
  const auto both = torch::cat({e, y}, 1);
  const auto ext = tail_.defined() ? torch::cat({tail_, both}, 2) : both;
  const int64_t len = ext.size(2);
  if (len >= 3) {
    const double inv_2h = static_cast<double>(grid_rows_) / 2.0;
    const auto s = square_sum((ext.narrow(2, 2, len - 2) - ext.narrow(2, 0, len - 2)) * inv_2h);
    de2_ += s.narrow(0, 0, c);
    dy2_ += s.narrow(0, c, c);
  }
  const int64_t keep = std::min<int64_t>(2, len);
  tail_ = ext.narrow(2, len - keep, keep).clone();
  const int64_t head_rows = std::min<int64_t>(2, grid_rows_);
  const int64_t held = head_.defined() ? head_.size(2) : 0;
  if (held < head_rows) {
    const auto more = both.narrow(2, 0, std::min(n, head_rows - held)).clone();
    head_ = held > 0 ? torch::cat({head_, more}, 2) : more;
  }
  next_row_ = r0 + n;
}

int64_t StreamedErrors::rows_at_once(int64_t row_values) {
  return std::max<int64_t>(1, (int64_t{64} << 10) / std::max<int64_t>(4 * row_values, 1));
}

int64_t StreamedErrors::work_bytes(int64_t row_values) {
  return 24 * 4 * row_values * rows_at_once(row_values);
}

StreamedErrors::Values StreamedErrors::finish() const {
  if (next_row_ != grid_rows_ || !e2_.defined()) {
    throw std::runtime_error("streamed errors: " + std::to_string(next_row_) + " of " +
                             std::to_string(grid_rows_) + " rows given");
  }
  const int64_t c = e2_.size(0);
  auto de2 = de2_.clone(), dy2 = dy2_.clone();
  // Rows 0 and H - 1, whose neighbours lie across the grid's ends (periodic):
  // row 0's are rows H - 1 and 1, row H - 1's rows H - 2 and 0. (With H = 1
  // or 2 both differences are 0, as the periodic differences of the whole.)
  if (grid_rows_ >= 2) {
    const double inv_2h = static_cast<double>(grid_rows_) / 2.0;
    const auto row = [](const at::Tensor& t, int64_t i) { return t.narrow(2, i, 1); };
    const auto s = square_sum((row(head_, 1) - row(tail_, 1)) * inv_2h) +
                   square_sum((row(head_, 0) - row(tail_, 0)) * inv_2h);
    de2 += s.narrow(0, 0, c);
    dy2 += s.narrow(0, c, c);
  }
  // As relative_loss: per channel, summed over the channels.
  const double l2_eps = LpLossOptions().eps(), h1_eps = H1LossOptions().eps();
  Values v;
  for (int64_t k = 0; k < c; ++k) {
    const double e2 = e2_[k].item<double>(), y2 = y2_[k].item<double>();
    v.l2 += std::sqrt(e2) / (std::sqrt(y2) + l2_eps);
    v.h1 +=
        std::sqrt(e2 + de2[k].item<double>()) / (std::sqrt(y2 + dy2[k].item<double>()) + h1_eps);
  }
  return v;
}

}  // namespace fno::detail
