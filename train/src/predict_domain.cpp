// fno_predict --domain-parallel N under torchrun: N ranks share each sample,
// each holding a band of rows of the first spatial dim (fno/band.h), and the
// W / N groups of them split the samples (fno_train/domain.h's mesh).
//
// Each rank reads only its rows of each input (HDF5 by hyperslab; a .pt file
// is loaded whole, then cut), runs the tiled forward on its band
// (TiledStep::set_band: the spectra added over the band's ranks), and with
// the truth sums its rows' squared errors, with one halo row from each
// neighbour for the H1 differences (periodic between the last band and the
// first), in float64, added over the band's ranks. The output is one HDF5
// file that no rank holds whole: rank 0 creates it (a temporary file of the
// full shape), releases it, and the ranks write their rows into it in turn,
// rank 0 first; rank 0 renames it into place at the end. Every step that may
// fail on one rank is agreed with an all-reduce before the next, so that a
// failure stops every rank with one line, and no rank waits for ever.
//
// A Navier-Stokes run (data.problem ns) reads each rank's rows of the
// records (NsRecordRows), rolls the recurrent model out on its band, or runs
// the space-time model over its rows of (x, y, t), and sums the errors per
// record as well (NsPrediction::band_errors).
//
// Samples go in rounds of as many as the host budget holds (256 MiB of a
// band's input, truth and output without one): each round is read, predicted
// and written in turn, so that the output's rows are never all in memory.
#include <fno/band.h>
#include <fno/losses.h>
#include <fno/tiled.h>
#include <fno_engine/forward_plan.h>
#include <fno_engine/tiled_runner.h>
#include <fno_train/distributed.h>
#include <fno_train/domain.h>
#include <fno_train/predict.h>

#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "predict_benchmark.h"
#include "predict_run.h"
#include "predict_stream.h"
#include "predict_support.h"

namespace fno::detail {

namespace {

std::string flag(int64_t n) { return "--domain-parallel " + std::to_string(n); }

// One batch's relative L2 and H1 errors of the whole grid from this rank's
// rows (band_error_sums), each [B] float64 on the CPU, as relative_loss gives
// per sample (summed over the channels).
// out, y: [B, C, n, *S'] (this rank's rows, decoded) -> ([B], [B])
std::pair<torch::Tensor, torch::Tensor> band_errors(const Band& band, int64_t grid_rows,
                                                    const torch::Tensor& out,
                                                    const torch::Tensor& y) {
  const auto sums = band_error_sums(band, grid_rows, out, y);  // [4, B, C]
  const double l2_eps = LpLossOptions().eps(), h1_eps = H1LossOptions().eps();
  const auto l2 = (sums[0].sqrt() / (sums[1].sqrt() + l2_eps)).sum(1);
  const auto h1 = ((sums[0] + sums[2]).sqrt() / ((sums[1] + sums[3]).sqrt() + h1_eps)).sum(1);
  return {l2, h1};
}

// The device of a rank: CUDA LOCAL_RANK for auto and cuda (when there is
// one), an explicit cuda:N as given, else the CPU.
torch::Device rank_device(const std::string& name, int64_t local_rank) {
  if (name == "cpu" || (name == "auto" && !torch::cuda::is_available())) return torch::kCPU;
  if (name == "auto" || name == "cuda") {
    const auto count = static_cast<int64_t>(torch::cuda::device_count());
    if (local_rank >= count) {
      throw PredictUsageError("--device " + name + ": LOCAL_RANK " + std::to_string(local_rank) +
                              " needs GPU " + std::to_string(local_rank) + ", but only " +
                              std::to_string(count) + " CUDA device(s) are visible");
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  }
  return pick_device(name);
}

}  // namespace

// (predict_run.h)
void agreed(dist::Group& world, const std::function<void()>& step) {
  std::exception_ptr error;
  double kind = 0;  // 1: the command line's (PredictUsageError), 2: any other
  try {
    step();
  } catch (const PredictUsageError&) {
    error = std::current_exception();
    kind = 1;
  } catch (...) {
    error = std::current_exception();
    kind = 2;
  }
  std::vector<double> kinds(static_cast<size_t>(world.size()), 0.0);
  kinds[static_cast<size_t>(world.rank())] = kind;
  kinds = world.all_reduce_sum(kinds);
  if (error) std::rethrow_exception(error);
  for (size_t k = 0; k < kinds.size(); ++k) {
    if (kinds[k] == 0) continue;
    const std::string why = "rank " + std::to_string(k) + " failed (its line says why)";
    if (kinds[k] == 1) throw PredictUsageError(why);
    throw std::runtime_error(why);
  }
}

std::pair<int64_t, int64_t> group_share(int64_t total, int64_t groups, int64_t g) {
  const int64_t base = total / groups, extra = total % groups;
  return {g * base + std::min(g, extra), base + (g < extra ? 1 : 0)};
}

std::string from_main(dist::Group& world, const std::string& text) {
  const auto size = world.all_reduce_sum(
      std::vector<double>{world.is_main() ? static_cast<double>(text.size()) : 0.0});
  std::vector<double> chars(static_cast<size_t>(size[0]), 0.0);
  if (world.is_main()) {
    for (size_t i = 0; i < text.size(); ++i) chars[i] = static_cast<unsigned char>(text[i]);
  }
  chars = world.all_reduce_sum(chars);
  std::string out;
  for (const double c : chars) out.push_back(static_cast<char>(static_cast<int>(c)));
  return out;
}

ForwardPlan band_plan(FNO model, std::vector<int64_t> shape, const ForwardBudget& budget,
                      const torch::Device& device, int64_t elem) {
  auto plan = choose_forward_plan(model, shape, budget, device, elem);
  if (!plan.tiled) {  // (the whole band as one tile)
    TiledChoice c;
    c.plan.tile_rows = shape[2];
    c.plan.inputs.assign(static_cast<size_t>(model->options.n_layers()), TilePlace::kDevice);
    plan.tiled = c;
    plan.text = "the band as one tile, batches of " + std::to_string(plan.micro);
  }
  return plan;
}

// One domain-parallel prediction: PredictRun's model and inputs, this rank's
// band and samples, the plan, and the rounds.
class DomainPrediction {
 public:
  DomainPrediction(PredictRun& run, std::shared_ptr<dist::Group> world)
      : p_(run), o_(run.o), world_(std::move(world)) {}

  PredictResult run() {
    agreed(*world_, [&] { place(); });
    agreed(*world_, [&] { create_output(); });
    temp_ = from_main(*world_, temp_);
    PredictProgress progress(world_->is_main() ? p_.progress_mode : Progress::kNone,
                             o_.progress_every);
    const auto wall0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < rounds_; ++k) {
      const int64_t s0 = k * round_;
      const int64_t m = std::clamp<int64_t>(mine_ - s0, 0, round_);
      agreed(*world_, [&] { read(s0, m); });
      agreed(*world_, [&] { predict(m); });
      for (int64_t turn = 0; turn < world_->size(); ++turn) {
        agreed(*world_, [&] {
          if (turn == world_->rank()) write(s0, m);
        });
      }
      progress.samples(std::min(mine_, s0 + round_), mine_);
    }
    progress.clear();
    if (p_.device.is_cuda()) torch::cuda::synchronize();
    p_.r.forward_wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    gather_errors();
    PredictResult result = p_.r;
    agreed(*world_, [&] {
      if (world_->is_main()) result = p_.finish();
    });
    if (!world_->is_main()) {
      result.out = o_.out;
      result.main = false;
    }
    return result;
  }

 private:
  // This rank's band and samples, the plan and the rounds; refuses a grid
  // the ranks cannot split (the same on every rank).
  void place() {
    const int64_t n = o_.domain_parallel;
    const auto& grid = p_.grid_v;
    if (const auto why = tiled_unsupported(p_.model); !why.empty()) {
      throw PredictUsageError(flag(n) + ": each rank runs its band in tiles, and this model " +
                              "cannot: " + why);
    }
    if (const auto why = domain_unsupported(p_.model, grid, n, o_.tile_rows); !why.empty()) {
      throw PredictUsageError(p_.inputs_text + ": " + why + " (" + flag(n) + ")");
    }
    mesh_ = make_domain_mesh(world_, n);
    band_ = make_band(mesh_, grid[0], nullptr);
    // (with N = 1 the mesh has no groups: each rank is a sample group)
    band_index_ = world_->rank() % n;
    std::tie(row0_, rows_) = band_rows(grid[0], n, band_index_);
    const int64_t widest = band_rows(grid[0], n, 0).second;
    // The samples: this sample group's contiguous run (group_share).
    const int64_t groups = world_->size() / n;
    std::tie(first_, mine_) = group_share(p_.n, groups, world_->rank() / n);
    const int64_t per = group_share(p_.n, groups, 0).second;  // (the longest)
    // The plan of the widest band's batch, the same on every rank.
    const auto& mo = p_.cfg.model;
    p_.batch = std::min<int64_t>(
        p_.n, o_.batch_size > 0
                  ? o_.batch_size
                  : (p_.cfg.data.tests.empty() ? p_.cfg.data.batch_size
                                               : p_.cfg.data.tests.front().batch_size));
    p_.elem = c10::elementSize(compute_dtype(p_.precision));
    auto shape = p_.x_shape;
    shape[0] = p_.batch;
    shape[2] = widest;
    try {
      plan_ =
          band_plan(p_.model, shape,
                    ForwardBudget().gpu_memory_limit(o_.gpu_memory_limit).tile_rows(o_.tile_rows),
                    p_.device, p_.elem);
    } catch (const ForwardBudgetError& e) {
      reword_budget(e);
    }
    records_ = p_.ns ? p_.ns->t_out() : 0;
    if (p_.truth) l2_all_.assign(static_cast<size_t>((2 + records_) * p_.n), 0.0);
    tiles_ = std::make_unique<TiledRunner>(p_.model, nullptr);
    tiles_->set_band(band_);
    p_.in_norm.to(p_.device);
    p_.out_norm.to(p_.device);
    // Rounds of samples whose band rows (input, output, truth) fit the budget.
    int64_t row_points = 1;
    for (size_t i = 1; i < grid.size(); ++i) row_points *= grid[i];
    // (a recurrent rollout's output and truth: t_out records)
    const int64_t out_c = p_.ns && p_.ns->recurrent() ? p_.ns->t_out() : mo.out_channels();
    const int64_t per_sample =
        widest * row_points * (mo.in_channels() + out_c * (p_.truth ? 2 : 1)) * 4;
    const int64_t budget =
        o_.host_memory_limit > 0 ? o_.host_memory_limit / 2 : (int64_t{256} << 20);
    round_ = std::max<int64_t>(1, budget / per_sample);
    if (round_ >= p_.batch) round_ -= round_ % p_.batch;
    rounds_ = (per + round_ - 1) / round_;
    const int64_t least = band_rows(grid[0], n, n - 1).second;
    const std::string thinnest = least < widest ? std::to_string(least) + "-" : "";
    p_.r.plan = p_.device.str() + ", " + to_string(p_.precision) + ", " + std::to_string(p_.n) +
                " sample(s) at " + grid_text(grid) + ": domain parallel " + std::to_string(n) +
                " (bands of " + thinnest + std::to_string(widest) + " rows, " +
                std::to_string(groups) + " sample group(s)), " + plan_.text;
  }

  // Rank 0: the output's temporary file, its datasets whole in shape, closed
  // for the others to write (temp_).
  void create_output() {
    if (!world_->is_main()) return;
    const auto& mo = p_.cfg.model;
    // (Navier-Stokes: the predicted records, (N, t_out, R, R'), as one process's)
    std::vector<int64_t> pred_shape{p_.n};
    if (p_.ns) {
      pred_shape.push_back(records_);
      pred_shape.insert(pred_shape.end(), p_.grid_v.begin(), p_.grid_v.begin() + 2);
    } else {
      if (mo.out_channels() > 1) pred_shape.push_back(mo.out_channels());
      pred_shape.insert(pred_shape.end(), p_.grid_v.begin(), p_.grid_v.end());
    }
    std::vector<std::pair<std::string, std::vector<int64_t>>> sets{{"pred", pred_shape}};
    if (p_.truth) {
      sets.push_back({"l2", {p_.n, 1}});
      sets.push_back({"h1", {p_.n, 1}});
      if (p_.ns) sets.push_back({"l2_per_record", {p_.n, records_}});
    }
    int64_t points = 1;
    for (const auto v : p_.grid_v) points *= v;
    // (--overwrite: made whole beside the old one, then renamed over it)
    const auto wo = data::SampleWriterOptions()
                        .replace(o_.overwrite)
                        .compress(p_.n * points * mo.out_channels() * 4 <= (int64_t{64} << 20));
    p_.writer = std::make_unique<data::Hdf5SampleWriter>(o_.out, sets, wo);
    temp_ = p_.writer->release();
  }

  // Samples [s0, s0 + m) of this group's: their band rows of the input and
  // the truth, on the host.
  void read(int64_t s0, int64_t m) {
    x_ = torch::Tensor();
    y_ = torch::Tensor();
    if (m == 0) return;
    std::vector<torch::Tensor> xs, ys;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t s = o_.first + first_ + s0 + i;
      if (p_.ns) {
        auto [x, y] = p_.ns_rows->read(s, row0_, row0_ + rows_);
        xs.push_back(x);
        if (p_.truth) ys.push_back(y);
        continue;
      }
      xs.push_back(p_.files->read_x(s, row0_, row0_ + rows_));
      if (p_.truth) ys.push_back(p_.files->read_y(s, row0_, row0_ + rows_));
    }
    x_ = torch::cat(xs);
    if (p_.truth) y_ = torch::cat(ys);
  }

  // The forward of the round's samples on this band, batch by batch (the
  // same batches on the band's ranks), decoded; their errors.
  void predict(int64_t m) {
    torch::NoGradGuard no_grad;
    pred_ = torch::Tensor();
    l2_ = torch::empty({m}, torch::kDouble);
    h1_ = torch::empty({m}, torch::kDouble);
    per_record_ = torch::empty({m, records_}, torch::kDouble);
    if (m == 0) return;
    auto shape = x_.sizes().vec();
    shape[1] = p_.ns ? records_ : p_.cfg.model.out_channels();
    pred_ = torch::empty(shape, torch::kFloat);
    // in: [b, Cin, rows, *S'] -> [b, Cout, rows, *S']
    const StepModel band_forward = [this](const torch::Tensor& in) {
      return forward_under_plan(p_.model, plan_, in, tiles_.get());
    };
    for (int64_t b0 = 0; b0 < m; b0 += p_.batch) {
      const int64_t b = std::min(p_.batch, m - b0);
      // xb: [b, Cin, rows, *S'] -> out: [b, Cout, rows, *S'] (Navier-Stokes:
      // [b, t_in, rows, R'] -> the model's output layout, as NsPrediction::forward)
      const auto xb = normalize_rows(p_.in_norm, x_.narrow(0, b0, b).to(p_.device), row0_, false);
      auto out = (p_.ns ? p_.ns->forward(band_forward, xb) : band_forward(xb)).to(torch::kFloat);
      out = normalize_rows(p_.out_norm, out, row0_, /*inverse=*/true);
      pred_.narrow(0, b0, b).copy_(p_.ns ? p_.ns->trajectory(out) : out);
      if (p_.truth && p_.ns) {
        const auto e =
            p_.ns->band_errors(band_, p_.grid_v[0], out, y_.narrow(0, b0, b).to(p_.device));
        l2_.narrow(0, b0, b).copy_(e.l2);
        h1_.narrow(0, b0, b).copy_(e.h1);
        per_record_.narrow(0, b0, b).copy_(e.per_record);
      } else if (p_.truth) {
        const auto [l2, h1] =
            band_errors(band_, p_.grid_v[0], out, y_.narrow(0, b0, b).to(p_.device));
        l2_.narrow(0, b0, b).copy_(l2);
        h1_.narrow(0, b0, b).copy_(h1);
      }
    }
  }

  // This rank's turn: its rows of the round's samples into the output (and
  // with the truth, band 0 of each group its samples' errors).
  void write(int64_t s0, int64_t m) {
    if (m == 0) return;
    std::vector<std::string> names{"pred"};
    if (p_.truth) names.insert(names.end(), {"l2", "h1"});
    if (p_.truth && p_.ns) names.push_back("l2_per_record");
    auto out = data::Hdf5SampleWriter::join(temp_, names);
    const int64_t first = first_ + s0;
    if (pred_.size(1) > 1 || p_.ns) {
      out->write_rows("pred", first, 2, row0_, pred_);
    } else {
      out->write_rows("pred", first, 1, row0_, pred_.squeeze(1));
    }
    if (p_.truth && band_index_ == 0) {
      out->write("l2", first, l2_.view({m, 1}));
      out->write("h1", first, h1_.view({m, 1}));
      if (p_.ns) out->write("l2_per_record", first, per_record_);
    }
    out->release();
    if (p_.truth && band_index_ == 0) {
      for (int64_t i = 0; i < m; ++i) {
        l2_all_[static_cast<size_t>(first + i)] = l2_[i].item<double>();
        l2_all_[static_cast<size_t>(p_.n + first + i)] = h1_[i].item<double>();
        for (int64_t t = 0; t < records_; ++t) {
          l2_all_[static_cast<size_t>(2 * p_.n + (first + i) * records_ + t)] =
              per_record_[i][t].item<double>();
        }
      }
    }
  }

  // Every sample's errors on every rank (for rank 0's summary).
  void gather_errors() {
    if (!p_.truth) return;
    const auto all = world_->all_reduce_sum(l2_all_);
    p_.r.l2.assign(all.begin(), all.begin() + p_.n);
    p_.r.h1.assign(all.begin() + p_.n, all.begin() + 2 * p_.n);
    if (p_.ns) {  // (Navier-Stokes: each record's, summed over the samples for finish())
      const auto per_record =
          torch::tensor(std::vector<double>(all.begin() + 2 * p_.n, all.end()), torch::kDouble);
      p_.per_record_sum = per_record.view({p_.n, records_}).sum(0);
    }
    if (!world_->is_main()) {  // (rank 0's finish() adds its own)
      for (const double v : p_.r.l2) p_.r.mean_l2 += v / static_cast<double>(p_.n);
      for (const double v : p_.r.h1) p_.r.mean_h1 += v / static_cast<double>(p_.n);
      for (int64_t t = 0; p_.ns && t < records_; ++t) {
        p_.r.l2_per_record.push_back(p_.per_record_sum[t].item<double>() /
                                     static_cast<double>(p_.n));
      }
    }
  }

  PredictRun& p_;
  const PredictOptions& o_;
  std::shared_ptr<dist::Group> world_;
  DomainMesh mesh_;
  Band band_;
  int64_t band_index_ = 0;          // this rank's band among the sample's N
  int64_t row0_ = 0, rows_ = 0;     // this rank's band of rows
  int64_t first_ = 0, mine_ = 0;    // this group's samples (of the run's n)
  int64_t round_ = 1, rounds_ = 0;  // samples per round, and rounds (every rank)
  ForwardPlan plan_;
  std::unique_ptr<TiledRunner> tiles_;
  std::string temp_;            // the output's temporary file
  torch::Tensor x_, y_, pred_;  // the round's band rows: [m, C, rows, *S']
  torch::Tensor l2_, h1_;       // the round's errors: [m] float64
  torch::Tensor per_record_;    // Navier-Stokes: the round's [m, records_] float64
  int64_t records_ = 0;         // Navier-Stokes: the records predicted (t_out)
  // every sample's l2, then h1, then (Navier-Stokes) l2 per record (band 0's own)
  std::vector<double> l2_all_;
};

PredictResult predict_domain(const PredictOptions& options) {
  const int64_t n = options.domain_parallel;
  const auto env = dist::launch_env();
  const int64_t world_size = env ? env->world_size : 1;
  if (n < 1) throw PredictUsageError(flag(n) + ": expected a whole number >= 1");
  if (world_size % n != 0) {
    throw PredictUsageError(
        flag(n) + " does not divide the world size " + std::to_string(world_size) +
        (env ? " (the ranks that share one sample)"
             : ": run it under torchrun with a multiple of " + std::to_string(n) + " processes"));
  }
  // A run on benchmark data (data.format) rolls out as one process does.
  auto bench = benchmark_run_config(options);
  if (options.rollout && !bench) {
    throw PredictUsageError("--rollout: " + flag(n) +
                            " predicts, not rolls out, a run not on benchmark data (data.format)");
  }
  if (options.cuda_graphs == "on") {
    throw PredictUsageError("--cuda-graphs on: " + flag(n) + " runs each band eagerly");
  }
  if (!env) throw PredictUsageError(flag(n) + ": run it under torchrun (RANK, WORLD_SIZE unset)");
  auto o = options;
  const auto device = rank_device(o.device, env->local_rank);
  o.device = device.str();
  if (device.is_cuda()) c10::cuda::set_device(device.index());
  dist::GroupOptions go;
  go.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000.0));
  const auto world = dist::Group::create(*env, device, go);
  if (bench) return predict_benchmark_domain(o, std::move(*bench), world);
  PredictRun run(o);
  agreed(*world, [&] {
    run.check_request();
    run.load_model();
    if (run.ns) {
      run.open_ns_rows();
    } else {
      run.open_inputs();
    }
  });
  return DomainPrediction(run, world).run();
}

}  // namespace fno::detail
