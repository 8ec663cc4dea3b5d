// Internal to predict(): a sample's relative L2 and H1 errors against its
// truth from its rows, given tile by tile in order, without the whole sample
// in memory. The values are those of the evaluation's losses on the whole
// sample (relative_loss: LpLoss p = 2 and H1Loss, each with its default
// options, summed over the channels): the sums of squares are added per
// channel in float64, and the H1 loss's central differences along the rows
// take their neighbour rows across the tiles' edges: the last two rows of
// the tile before, and at the grid's ends the first two rows and the last
// two (periodic), kept until the last tile (band.h does the same across ranks
// with halo rows).
//
//   StreamedErrors e(grid_rows);
//   for each tile in order: e.add(r0, pred_tile, truth_tile);
//   const auto v = e.finish();  // v.l2, v.h1
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace fno::detail {

class StreamedErrors {
 public:
  /// `grid_rows`: the rows of the first spatial dim that the tiles cover.
  explicit StreamedErrors(int64_t grid_rows);

  /// Rows [r0, r0 + n) of the prediction and of the truth, the next ones after
  /// the rows given so far (r0 = 0 first). Throws std::runtime_error naming
  /// the rows when they come out of order or the shapes differ.
  // pred, truth: [1, C, n, *S'] (any float type, the CPU)
  void add(int64_t r0, const at::Tensor& pred, const at::Tensor& truth);

  struct Values {
    double l2 = 0, h1 = 0;
  };
  /// The errors once every row is given (throws std::runtime_error otherwise).
  Values finish() const;

  /// The rows to give add() at once, of `row_values` values each (channels x
  /// the points of a row), so that its work stays within work_bytes(): about
  /// 64 KiB of float32 truth, at least one row.
  static int64_t rows_at_once(int64_t row_values);
  /// The host bytes add() may hold for rows_at_once() rows (the truth's rows
  /// and their float64 work, about 24 times the float32 rows).
  static int64_t work_bytes(int64_t row_values);

 private:
  int64_t grid_rows_;
  int64_t next_row_ = 0;
  // Per channel [C], float64: sum e^2, sum y^2 (e = pred - truth), and the
  // sums of the squared first differences of e and of y over every dim.
  at::Tensor e2_, y2_, de2_, dy2_;
  // The sample's first rows and the latest rows given (at most two each), of
  // e and y stacked along the channels: [1, 2C, k, *S'].
  at::Tensor head_, tail_;
};

}  // namespace fno::detail
