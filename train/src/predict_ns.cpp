#include "predict_ns.h"

#include "predict_support.h"

#include <fno_data/darcy.h>
#include <fno_data/navier_stokes.h>
#include <fno_train/train_step.h>

#include <torch/torch.h>

#include <iostream>
#include <sstream>
#include <stdexcept>

namespace fno::detail {

namespace {

// The records u [N', R, R, T] of dataset `key` (the first `n_samples`, -1:
// all), subsampled along x and y. With `need` > 0 the file must hold at least
// that many records. The loader's warnings (fewer samples than asked) are held
// back in `warnings`: the caller says it in one line instead.
torch::Tensor read_records(const std::string& path, const std::string& key, int64_t n_samples,
                           int64_t subsample, int64_t t_in, int64_t t_out, bool truth,
                           std::string& warnings) {
  std::ostringstream held;
  struct Redirect {
    std::streambuf* old;
    explicit Redirect(std::streambuf* to) : old(std::cerr.rdbuf(to)) {}
    ~Redirect() { std::cerr.rdbuf(old); }
  } redirect(held.rdbuf());
  torch::Tensor u;
  try {
    if (truth) {
      // The trainer's reader: t_in + t_out records (t_out -1: at least one more).
      u = data::load_ns_records(
          path,
          data::NsLoadOptions().key(key).n_samples(n_samples).subsample(subsample).t_in(t_in).t_out(
              t_out > 0 ? t_out : -1));
    } else {
      // The inputs alone: t_in records are enough.
      u = data::load_hdf5(path, data::LoadOptions().x_key(key).y_key(key).n_samples(n_samples))
              .x.squeeze(1);
      if (u.dim() != 4) {
        throw std::runtime_error(path + ": dataset '" + key + "' has rank " +
                                 std::to_string(u.dim()) + ", expected (N, R, R, T) records");
      }
      if (u.size(3) < t_in) {
        throw std::runtime_error(path + ": dataset '" + key + "' holds " +
                                 std::to_string(u.size(3)) + " records; the model takes t_in " +
                                 std::to_string(t_in));
      }
      if (subsample > 1) {
        u = u.slice(1, 0, u.size(1), subsample).slice(2, 0, u.size(2), subsample).contiguous();
      }
    }
  } catch (...) {
    warnings = held.str();
    throw;
  }
  warnings = held.str();
  return u;
}

}  // namespace

NsPrediction::NsPrediction(const RunConfig& cfg)
    : recurrent_(cfg.data.ns_mode == NsMode::kRecurrent),
      t_in_(cfg.data.t_in),
      t_out_(cfg.data.t_out),
      subsample_(cfg.data.subsample) {}

void NsPrediction::load(const PredictOptions& o, const std::string& x_key,
                        const std::string& y_key) {
  const bool truth = !y_key.empty();
  const int64_t want = o.count > 0 ? o.first + o.count : -1;
  std::string warnings;
  auto u = read_records(o.input, truth ? y_key : x_key, want, subsample_, t_in_, t_out_, truth,
                        warnings);
  const int64_t held = u.size(0);
  if (o.first >= held || (o.count > 0 && o.first + o.count > held)) {
    throw PredictUsageError(o.input + ": --samples " + std::to_string(o.first) + ":" +
                            (o.count > 0 ? std::to_string(o.count) : std::string()) +
                            " asks past the " + std::to_string(held) + " samples it holds");
  }
  std::cerr << warnings;
  const int64_t n = o.count > 0 ? o.count : held - o.first;
  u = u.narrow(0, o.first, n);
  if (t_out_ <= 0) {
    // data.t_out -1 (the rest of the records): the records the input holds after t_in.
    t_out_ = u.size(3) - t_in_;
    if (t_out_ < 1) {
      throw std::runtime_error(o.input +
                               ": the run's data.t_out is -1 (the records after t_in), "
                               "and '" +
                               x_key + "' holds only the " + std::to_string(t_in_) +
                               " input records: give a file with the records to predict");
    }
  }
  if (truth) {
    auto p = pairs(u);
    y = p.y;
    if (x_key == y_key) {
      x = p.x;
      return;
    }
    // The inputs from another dataset than the truth's.
    u = read_records(o.input, x_key, want, subsample_, t_in_, t_out_, false, warnings);
    // (y: [n, t_out, R, R] or [n, 1, R, R, t_out]; its grid is dims 2 and 3)
    if (u.size(0) < o.first + n || u.size(1) != y.size(2) || u.size(2) != y.size(3)) {
      throw std::runtime_error(o.input + ": '" + x_key + "' and '" + y_key +
                               "' hold different samples or grids");
    }
    u = u.narrow(0, o.first, n);
  }
  x = u.narrow(3, 0, t_in_).permute({0, 3, 1, 2}).contiguous();
}

std::vector<int64_t> NsPrediction::model_input_shape() const {
  return model_input_shape(x.size(0), x.sizes().slice(2));
}

std::vector<int64_t> NsPrediction::model_input_shape(int64_t n, at::IntArrayRef grid) const {
  std::vector<int64_t> shape{n, t_in_};
  shape.insert(shape.end(), grid.begin(), grid.end());
  if (!recurrent_) shape.push_back(t_out_);
  return shape;
}

data::FieldPairs NsPrediction::pairs(const torch::Tensor& u) const {
  auto p = data::ns_recurrent_pairs(u, t_in_, t_out_);
  // [n, t_out, R, R'] -> [n, 1, R, R', t_out], as the trainer's ns_pairs
  if (!recurrent_) p.y = p.y.permute({0, 2, 3, 1}).unsqueeze(1).contiguous();
  return p;
}

torch::Tensor NsPrediction::forward(const StepModel& model, const torch::Tensor& x) const {
  if (recurrent_) return rollout(model, x, t_out_);
  // [b, t_in, R, R] -> [b, t_in, R, R, t_out], as the trainer's State::model_input
  return model(
      x.unsqueeze(4).expand({x.size(0), x.size(1), x.size(2), x.size(3), t_out_}).contiguous());
}

torch::Tensor NsPrediction::trajectory(const torch::Tensor& y) const {
  return recurrent_ ? y : y.squeeze(1).permute({0, 3, 1, 2});
}

NsPrediction::Errors NsPrediction::errors(const torch::Tensor& out, const torch::Tensor& y) const {
  // The evaluation's: the recurrent rollout's L2 over its whole trajectory,
  // the space-time model's relative L2 over (x, y, t) (fno_train's eval_losses).
  const int64_t d = recurrent_ ? 2 : 3;
  const auto l2 = relative_loss(LossName::kL2, d);
  const auto h1 = relative_loss(LossName::kH1, d);
  std::vector<torch::Tensor> e2, e1, per;
  for (int64_t i = 0; i < out.size(0); ++i) {
    const auto o = out.narrow(0, i, 1), t = y.narrow(0, i, 1);
    e2.push_back((recurrent_ ? trajectory_rel_l2(o, t) : l2(o, t)).reshape({1}));
    e1.push_back(h1(o, t).reshape({1}));
    per.push_back(per_step_rel_l2(trajectory(o), trajectory(t)).reshape({1, t_out_}));
  }
  Errors e;
  e.l2 = torch::cat(e2).to(torch::kDouble).cpu();
  e.h1 = torch::cat(e1).to(torch::kDouble).cpu();
  e.per_record = torch::cat(per).to(torch::kDouble).cpu();
  return e;
}

NsPrediction::Errors NsPrediction::band_errors(const Band& band, int64_t grid_rows,
                                               const torch::Tensor& out,
                                               const torch::Tensor& y) const {
  // sums: [4, b, C] (C: the records, recurrent; 1, space-time) summed e^2,
  // y^2 and their squared differences, over the band's ranks
  const auto sums = band_error_sums(band, grid_rows, out, y);
  const double l2_eps = LpLossOptions().eps(), h1_eps = H1LossOptions().eps();
  const auto ratio = [](const torch::Tensor& e2, const torch::Tensor& y2, double eps) {
    return e2.sqrt() / (y2.sqrt() + eps);
  };
  Errors e;
  // H1 over each channel's grid, summed over the channels (as relative_loss)
  e.h1 = ratio(sums[0] + sums[2], sums[1] + sums[3], h1_eps).sum(1);
  if (recurrent_) {
    // the whole trajectory's (trajectory_rel_l2), and each record's
    e.l2 = ratio(sums[0].sum(1), sums[1].sum(1), l2_eps);
    e.per_record = ratio(sums[0], sums[1], l2_eps);
    return e;
  }
  e.l2 = ratio(sums[0], sums[1], l2_eps).sum(1);
  // each record's: the squared norms over (x, y) of each time t
  // out, y: [b, 1, n, R', t_out] -> records: [2, b, t_out]
  const auto yd = y.to(torch::kDouble);
  auto records =
      torch::stack({(out.to(torch::kDouble) - yd).pow(2).sum({1, 2, 3}), yd.pow(2).sum({1, 2, 3})})
          .contiguous();
  if (band.split()) band.sum(records);
  records = records.cpu();
  e.per_record = ratio(records[0], records[1], l2_eps);
  return e;
}

}  // namespace fno::detail
