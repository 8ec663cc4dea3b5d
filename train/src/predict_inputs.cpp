#include "predict_inputs.h"

#include <fno_train/predict.h>

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "predict_run.h"
#include "predict_support.h"

namespace fno::detail {

struct InputFiles::File {
  std::string path;
  int64_t first = 0, count = 0;  // its samples in the set: [first, first + count)
  std::string x_key, y_key;
  bool hdf5 = false;
  data::LoadOptions lo;                        // its keys (without the truth: x alone)
  std::unique_ptr<data::Hdf5SlabReader> x, y;  // an HDF5 file
  data::FieldPairs held;                       // a .pt file, read whole
};

namespace {

std::vector<int64_t> tail_of(const std::vector<int64_t>& shape) {
  return std::vector<int64_t>(shape.begin() + 1, shape.end());
}

}  // namespace

InputFiles::InputFiles(std::vector<std::string> paths, const data::LoadOptions& lo, bool truth)
    : paths_(std::move(paths)), truth_(truth) {
  for (const auto& p : paths_) text_ += (text_.empty() ? "" : ", ") + p;
  int64_t total = 0;
  for (const auto& path : paths_) {
    auto f = std::make_unique<File>();
    f->path = path;
    std::vector<int64_t> xs, ys;
    // (the loaders' default names where none is given)
    f->hdf5 = data::detect_format(path) == data::FileFormat::kHdf5;
    const bool hdf5 = f->hdf5;
    f->x_key = !lo.x_key().empty() ? lo.x_key() : (hdf5 ? "coeff" : "x");
    f->y_key = !truth ? f->x_key : (!lo.y_key().empty() ? lo.y_key() : (hdf5 ? "sol" : "y"));
    f->lo = lo;
    f->lo.x_key(f->x_key).y_key(f->y_key);
    if (hdf5) {
      f->x = std::make_unique<data::Hdf5SlabReader>(path, f->x_key, lo.x_layout());
      xs = f->x->shape();
      if (truth) {
        f->y = std::make_unique<data::Hdf5SlabReader>(path, f->y_key, lo.y_layout());
        ys = f->y->shape();
      }
    } else {
      f->held = data::load_darcy(path, f->lo);
      xs = f->held.x.sizes().vec();
      if (truth) ys = f->held.y.sizes().vec();
    }
    if (truth && (ys[0] != xs[0] || ys.size() != xs.size() ||
                  !std::equal(xs.begin() + 2, xs.end(), ys.begin() + 2))) {
      throw std::runtime_error(path + ": the truth '" + f->y_key + "' is " + grid_text(ys) +
                               " and the input '" + f->x_key + "' " + grid_text(xs) +
                               " (samples, channels, grid): they must hold the same samples "
                               "on the same grid");
    }
    if (files_.empty()) {
      x_shape_ = xs;
      y_shape_ = ys;
    } else if (tail_of(xs) != tail_of(x_shape_) || (truth && tail_of(ys) != tail_of(y_shape_))) {
      const bool in_x = tail_of(xs) != tail_of(x_shape_);
      const auto& key = in_x ? f->x_key : f->y_key;
      throw std::runtime_error(
          path + ": '" + key + "' is " + grid_text(in_x ? xs : ys) + " where " + paths_[0] +
          "'s is " + grid_text(in_x ? x_shape_ : y_shape_) +
          " (samples, channels, grid): the --input files must agree on channels and grid");
    }
    f->first = total;
    f->count = xs[0];
    total += xs[0];
    files_.push_back(std::move(f));
  }
  x_shape_[0] = total;
  if (truth) y_shape_[0] = total;
}

InputFiles::~InputFiles() = default;

const std::string& InputFiles::x_key() const { return files_.front()->x_key; }

bool InputFiles::streamable() const {
  for (const auto& f : files_) {
    if (!f->x || (truth_ && !f->y)) return false;
  }
  return true;
}

int64_t InputFiles::cache_bytes(bool truth) const {
  int64_t bytes = 0;
  for (const auto& f : files_) {
    if (f->x) bytes += f->x->cache_bytes();
    if (truth && f->y) bytes += f->y->cache_bytes();
  }
  return bytes;
}

int64_t InputFiles::check_range(int64_t first, int64_t count) const {
  const int64_t held = x_shape_[0];
  if (first >= held || (count > 0 && first + count > held)) {
    const std::string range = "--samples " + std::to_string(first) + ":" +
                              (count > 0 ? std::to_string(count) : std::string());
    if (files_.size() == 1) {
      throw PredictUsageError(paths_[0] + ": " + range + " asks past the " + std::to_string(held) +
                              " samples it holds");
    }
    std::string each;
    for (const auto& f : files_) {
      each += (each.empty() ? "" : ", ") + f->path + " " + std::to_string(f->count);
    }
    throw PredictUsageError(range + " asks past the " + std::to_string(held) + " samples the " +
                            std::to_string(files_.size()) + " --input files hold (" + each + ")");
  }
  return count > 0 ? count : held - first;
}

std::pair<torch::Tensor, torch::Tensor> InputFiles::load(int64_t first, int64_t n) const {
  std::vector<torch::Tensor> xs, ys;
  for (const auto& f : files_) {
    const int64_t a = std::max(first, f->first), b = std::min(first + n, f->first + f->count);
    if (a >= b) continue;
    data::FieldPairs pairs = f->held;
    if (f->hdf5) {  // (the loaders read as far as the range needs)
      auto lo = f->lo;
      pairs = data::load_darcy(f->path, lo.n_samples(b - f->first));
    }
    xs.push_back(pairs.x.narrow(0, a - f->first, b - a));
    if (truth_) ys.push_back(pairs.y.narrow(0, a - f->first, b - a));
  }
  auto x = xs.size() == 1 ? xs[0] : torch::cat(xs);
  auto y = !truth_ ? torch::Tensor() : (ys.size() == 1 ? ys[0] : torch::cat(ys));
  return {x, y};
}

const InputFiles::File& InputFiles::file_of(int64_t& s) const {
  for (const auto& f : files_) {
    if (s < f->first + f->count) {
      s -= f->first;
      return *f;
    }
  }
  throw std::out_of_range("sample " + std::to_string(s) + " past the inputs");
}

torch::Tensor InputFiles::read_x(int64_t s, int64_t r0, int64_t r1) const {
  const auto& f = file_of(s);
  if (!f.hdf5) return f.held.x.narrow(0, s, 1).narrow(2, r0, r1 - r0).contiguous();
  TORCH_CHECK(f.x, f.path, ": not open for reading by rows");
  return f.x->read(s, s + 1, r0, r1);
}

torch::Tensor InputFiles::read_y(int64_t s, int64_t r0, int64_t r1) const {
  const auto& f = file_of(s);
  if (!f.hdf5) return f.held.y.narrow(0, s, 1).narrow(2, r0, r1 - r0).contiguous();
  TORCH_CHECK(f.y, f.path, ": the truth is not open for reading by rows");
  return f.y->read(s, s + 1, r0, r1);
}

void InputFiles::close() {
  for (auto& f : files_) {
    f->x.reset();
    f->y.reset();
  }
}

// PredictRun's inputs (predict_run.h).

void PredictRun::open_inputs() {
  // The inputs (and the truth): the loaders read x alone when y_key names x.
  truth = !o.y_key.empty();
  if (ns) return open_ns_inputs();
  // (names not given: each file's format's default)
  lo.x_key(o.x_key.empty() ? cfg.data.x_key : o.x_key);
  lo.y_key(o.y_key);
  // HDF5 files are opened by their shapes (streamed, or read a range at a
  // time later); .pt files are read whole.
  files = std::make_unique<InputFiles>(input_paths, lo, truth);
  n = files->check_range(o.first, o.count);
  x_shape = files->x_shape();
  x_shape[0] = n;
  const auto& mo = cfg.model;
  n_dim = static_cast<int64_t>(mo.n_modes().size());
  xk = files->x_key();
  const auto x_dim = static_cast<int64_t>(x_shape.size());
  if (x_dim - 2 != n_dim) {
    throw std::runtime_error(inputs_text + ": '" + xk + "' has " + std::to_string(x_dim - 2) +
                             " spatial dims; the model (" + cfg_text + ") has " +
                             std::to_string(n_dim));
  }
  if (x_shape[1] != mo.in_channels() || (truth && files->y_shape()[1] != mo.out_channels())) {
    throw std::runtime_error(
        inputs_text + ": '" + xk + "' gives " + std::to_string(x_shape[1]) + " input channel(s)" +
        (truth ? " and '" + o.y_key + "' " + std::to_string(files->y_shape()[1]) + " output" : "") +
        "; the model takes " + std::to_string(mo.in_channels()) + " in and gives " +
        std::to_string(mo.out_channels()) + " out");
  }
  grid_v.assign(x_shape.begin() + 2, x_shape.end());
  const at::IntArrayRef grid(grid_v);
  check_grid();
  check_normalizer_grid(in_norm, "input", grid, inputs_text);
  check_normalizer_grid(out_norm, "output", grid, inputs_text);
  r.n_samples = n;
  r.grid.assign(grid.begin(), grid.end());
}

// A Navier-Stokes run's records: its first t_in records in, the truth after
// them; the model's grid is (R, R) (recurrent) or (R, R, t_out) (space-time).
// Several files are read whole, one after another, and the range taken of all.
void PredictRun::open_ns_inputs() {
  xk = o.x_key.empty() ? (cfg.data.x_key.empty() ? "u" : cfg.data.x_key) : o.x_key;
  if (input_paths.size() == 1) {
    auto one = o;  // (the file given as inputs, or as input)
    one.input = input_paths[0];
    one.inputs.clear();
    ns->load(one, xk, o.y_key);
    x = ns->x;
    y = ns->y;
  } else {
    std::vector<torch::Tensor> xs, ys;
    for (const auto& path : input_paths) {
      auto one = o;
      one.input = path;
      one.inputs.clear();
      one.first = 0;
      one.count = -1;
      ns->load(one, xk, o.y_key);
      if (!xs.empty() && (ns->x.sizes().slice(1) != xs[0].sizes().slice(1) ||
                          (truth && ns->y.sizes().slice(1) != ys[0].sizes().slice(1)))) {
        throw std::runtime_error(path + ": '" + xk + "' gives records of " +
                                 grid_text(ns->x.sizes().slice(1)) + " where " + input_paths[0] +
                                 " gives " + grid_text(xs[0].sizes().slice(1)) +
                                 ": the --input files must agree on channels and grid");
      }
      xs.push_back(ns->x);
      if (truth) ys.push_back(ns->y);
    }
    const auto all = torch::cat(xs);
    std::vector<int64_t> shape = all.sizes().vec();
    if (o.first >= shape[0] || (o.count > 0 && o.first + o.count > shape[0])) {
      throw PredictUsageError("--samples " + std::to_string(o.first) + ":" +
                              (o.count > 0 ? std::to_string(o.count) : std::string()) +
                              " asks past the " + std::to_string(shape[0]) + " samples the " +
                              std::to_string(input_paths.size()) + " --input files hold");
    }
    const int64_t count = o.count > 0 ? o.count : shape[0] - o.first;
    x = all.narrow(0, o.first, count);
    if (truth) y = torch::cat(ys).narrow(0, o.first, count);
  }
  n = x.size(0);
  x_shape = ns->model_input_shape();
  accept_ns_inputs(x.sizes().slice(2));
}

// Navier-Stokes inputs of the model's input shape x_shape (n samples), their
// records' grid `records`: checked against the model and the normalizers.
void PredictRun::accept_ns_inputs(torch::IntArrayRef records) {
  n_dim = static_cast<int64_t>(cfg.model.n_modes().size());
  if (static_cast<int64_t>(x_shape.size()) - 2 != n_dim || x_shape[1] != cfg.model.in_channels()) {
    throw std::runtime_error(inputs_text + ": '" + xk + "' gives inputs of shape " +
                             grid_text(x_shape) + " (t_in " + std::to_string(ns->t_in()) +
                             " records); the model (" + cfg_text + ") takes " +
                             std::to_string(cfg.model.in_channels()) + " channels over " +
                             std::to_string(n_dim) + " dims");
  }
  grid_v.assign(x_shape.begin() + 2, x_shape.end());
  check_grid();
  check_normalizer_grid(in_norm, "input", records, inputs_text);
  check_normalizer_grid(out_norm, "output", grid_v, inputs_text);
  r.n_samples = n;
  r.grid = grid_v;
}

// A grid smaller than the model's n_modes (which count both signs of a
// dim's frequencies) would drop some of the trained spectrum.
void PredictRun::check_grid() const {
  const auto& mo = cfg.model;
  const at::IntArrayRef grid(grid_v);
  for (int64_t i = 0; i < n_dim; ++i) {
    if (grid[i] < mo.n_modes()[i]) {
      throw std::runtime_error(inputs_text + ": grid " + grid_text(grid) +
                               " is smaller than the model's n_modes (" + grid_text(mo.n_modes()) +
                               " modes, half of each sign)");
    }
  }
}

}  // namespace fno::detail
