// Navier-Stokes data for training: the records of fno_datagen --problem ns
// (or the FNO paper's .mat files) as input/output pairs, the two ways the
// paper trains on them.
//
// A file holds u (N, R, R, T): the vorticity at T record times (MATLAB v7.3
// files store it reversed; load_hdf5 turns it back). Records 0 .. t_in - 1
// are the input, the next t_out the output.
#pragma once

#include <fno_data/darcy.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <string>

namespace fno::data {

struct NsLoadOptions {
  /// The records' dataset ("u", as fno_datagen and the paper's files name it).
  TORCH_ARG(std::string, key) = "u";
  /// The first n samples; -1 keeps all.
  TORCH_ARG(int64_t, n_samples) = -1;
  /// Keep every k-th grid point along x and y (not along time).
  TORCH_ARG(int64_t, subsample) = 1;
  /// Records given as the input (the paper: 10).
  TORCH_ARG(int64_t, t_in) = 10;
  /// Records to predict after them; -1: all the file has left.
  TORCH_ARG(int64_t, t_out) = -1;
};

/// The records u [N, R', R', T] float32 of a file; throws std::runtime_error
/// naming the file when the dataset is not (N, R, R, T) or holds fewer than
/// t_in + t_out records.
torch::Tensor load_ns_records(const std::string& path, const NsLoadOptions& options = {});

/// Space-time pairs for a 3D FNO over (x, y, t), as the paper's FNO-3D: the
/// t_in input records as channels, constant along the output's time axis,
/// and the t_out records after them as one channel over (x, y, t).
// u: [N, R, R, T] -> x [N, t_in, R, R, t_out], y [N, 1, R, R, t_out]
FieldPairs ns_space_time_pairs(const torch::Tensor& u, int64_t t_in, int64_t t_out);

/// Recurrent pairs for a 2D FNO, as the paper's FNO-2D: the t_in input
/// records as channels, and the t_out records after them, which a model rolls
/// out one at a time (each prediction becomes the newest input channel).
// u: [N, R, R, T] -> x [N, t_in, R, R], y [N, t_out, R, R]
FieldPairs ns_recurrent_pairs(const torch::Tensor& u, int64_t t_in, int64_t t_out);

}  // namespace fno::data
