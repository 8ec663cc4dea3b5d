// Navier-Stokes records read by rows (NsRecordRows, predict_ns.h), and a
// domain-parallel run's opening of them (PredictRun::open_ns_rows).
#include <fno_data/darcy.h>
#include <fno_data/hdf5_slab.h>

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "predict_ns.h"
#include "predict_run.h"
#include "predict_support.h"

namespace fno::detail {

// One file: its readers by hyperslab, or its pairs held whole.
struct NsRecordRows::File {
  std::string path;
  int64_t samples = 0;
  std::unique_ptr<data::Hdf5SlabReader> x;  // the records (null: held whole)
  std::unique_ptr<data::Hdf5SlabReader> y;  // the truth's, when another dataset's
  data::FieldPairs held;                    // x [N, t_in, R, R'], y in the model's layout
};

NsRecordRows::NsRecordRows(const std::vector<std::string>& paths, const std::string& x_key,
                           const std::string& y_key, NsPrediction& ns)
    : ns_(ns), truth_(!y_key.empty()) {
  for (const auto& path : paths) {
    auto f = std::make_unique<File>();
    f->path = path;
    open(*f, x_key, y_key);
    if (!f->x) {
      // The loaders read it whole (and say why when the records will not do).
      NsPrediction whole = ns;  // (data.t_out -1: this file's records after t_in)
      PredictOptions one;
      one.input = path;
      whole.load(one, x_key, y_key);
      f->held.x = whole.x;
      f->held.y = whole.y;
      f->samples = whole.x.size(0);
      if (ns.t_out() <= 0) ns.set_t_out(whole.t_out());
    }
    // grid: the records' (R, R')
    const std::vector<int64_t> grid =
        f->x ? std::vector<int64_t>(f->x->shape().begin() + 2, f->x->shape().begin() + 4)
             : f->held.x.sizes().slice(2).vec();
    if (!grid_.empty() && grid != grid_) {
      throw std::runtime_error(path + ": '" + x_key + "' gives records of " + grid_text(grid) +
                               " where " + paths[0] + " gives " + grid_text(grid_) +
                               ": the --input files must agree on channels and grid");
    }
    grid_ = grid;
    files_.push_back(std::move(f));
  }
}

NsRecordRows::~NsRecordRows() = default;

// An HDF5 file at subsample 1 whose records hold what the run needs: its
// readers (else f.x stays null, and the file is loaded whole).
void NsRecordRows::open(File& f, const std::string& x_key, const std::string& y_key) {
  if (ns_.subsample() != 1 || data::detect_format(f.path) != data::FileFormat::kHdf5) return;
  const int64_t t_in = ns_.t_in(), t_out = ns_.t_out();
  // (t_out -1 needs at least one record after t_in; without the truth, a
  // fixed t_out needs the input records alone)
  const int64_t need = t_in + std::max<int64_t>(t_out, 1);
  auto x = std::make_unique<data::Hdf5SlabReader>(f.path, x_key, data::Layout::kGrid);
  const auto xs = x->shape();  // [N, 1, R, R', T]
  if (xs.size() != 5 || xs[4] < (truth_ || t_out <= 0 ? need : t_in)) return;
  int64_t records = xs[4];
  if (truth_ && y_key != x_key) {
    auto y = std::make_unique<data::Hdf5SlabReader>(f.path, y_key, data::Layout::kGrid);
    const auto ys = y->shape();
    if (ys.size() != 5 || ys[4] < need || ys[0] > xs[0] || ys[2] != xs[2] || ys[3] != xs[3]) {
      return;
    }
    records = ys[4];
    f.y = std::move(y);
  }
  f.samples = f.y ? f.y->shape()[0] : xs[0];
  f.x = std::move(x);
  // (the file read only in parts: the first fixes data.t_out -1)
  if (t_out <= 0) ns_.set_t_out(records - t_in);
}

int64_t NsRecordRows::check_range(int64_t first, int64_t count) const {
  int64_t held = 0;
  for (const auto& f : files_) held += f->samples;
  if (first >= held || (count > 0 && first + count > held)) {
    const std::string range =
        "--samples " + std::to_string(first) + ":" + (count > 0 ? std::to_string(count) : "");
    if (files_.size() == 1) {
      throw PredictUsageError(files_[0]->path + ": " + range + " asks past the " +
                              std::to_string(held) + " samples it holds");
    }
    throw PredictUsageError(range + " asks past the " + std::to_string(held) + " samples the " +
                            std::to_string(files_.size()) + " --input files hold");
  }
  return count > 0 ? count : held - first;
}

const NsRecordRows::File& NsRecordRows::file_of(int64_t& s) const {
  for (const auto& f : files_) {
    if (s < f->samples) return *f;
    s -= f->samples;
  }
  throw std::out_of_range("sample past the records");
}

std::pair<torch::Tensor, torch::Tensor> NsRecordRows::read(int64_t s, int64_t r0,
                                                           int64_t r1) const {
  const auto& f = file_of(s);
  if (!f.x) {
    return {
        f.held.x.narrow(0, s, 1).narrow(2, r0, r1 - r0).contiguous(),
        truth_ ? f.held.y.narrow(0, s, 1).narrow(2, r0, r1 - r0).contiguous() : torch::Tensor()};
  }
  // u: [1, 1, rows, R', T] -> [1, rows, R', T]
  const auto u = f.x->read(s, s + 1, r0, r1).squeeze(1);
  const auto x = u.narrow(3, 0, ns_.t_in()).permute({0, 3, 1, 2}).contiguous();
  if (!truth_) return {x, torch::Tensor()};
  return {x, ns_.pairs(f.y ? f.y->read(s, s + 1, r0, r1).squeeze(1) : u).y};
}

// PredictRun's (predict_run.h): a domain-parallel run's records, opened by
// rows; n, the model's input shape and grid, checked as open_ns_inputs does.
void PredictRun::open_ns_rows() {
  truth = !o.y_key.empty();
  xk = o.x_key.empty() ? (cfg.data.x_key.empty() ? "u" : cfg.data.x_key) : o.x_key;
  ns_rows = std::make_unique<NsRecordRows>(input_paths, xk, o.y_key, *ns);
  n = ns_rows->check_range(o.first, o.count);
  x_shape = ns->model_input_shape(n, ns_rows->grid());
  accept_ns_inputs(ns_rows->grid());
}

}  // namespace fno::detail
