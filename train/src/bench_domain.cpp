#include "bench_domain.h"
#include "bench_trace.h"

#include <fno/band.h>
#include <fno/losses.h>
#include <fno/optim.h>
#include <fno/precision.h>
#include <fno_engine/collective_search.h>
#include <fno_engine/offload_step.h>
#include <fno_engine/tiled_plan.h>
#include <fno_train/domain.h>
#include <fno_train/train_step.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include <fno_engine/tiled_runner.h>

namespace fno {
namespace {

// f() timed from an idle GPU to an idle GPU, in ms.
template <class F>
double timed(F&& f) {
  torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A row's failure as its status, as bench.cpp's rows say it.
template <class F>
std::string status_of(F&& f) {
  try {
    f();
    return "ok";
  } catch (const dist::Error&) {
    throw;  // the ranks can no longer step together
  } catch (const c10::OutOfMemoryError&) {
    return "oom";
  } catch (const offload::BudgetError& e) {
    return std::string("over budget: ") + e.what();
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    return what.find("out of memory") != std::string::npos
               ? "oom"
               : "error: " + what.substr(0, what.find('\n'));
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what();
  }
}

// The tiled plans of a band that auto's search trial-steps (the estimate's fastest first).
constexpr size_t kCandidates = 4;

// A band's step: the whole band with activations kept (TiledRunner::step_whole), or tiled.
struct BandPlan {
  bool whole = false;
  TiledChoice tiled;
  std::string text() const { return whole ? "whole band, activations kept" : tiled.to_string(); }
};

struct DomainRunner {
  const BenchOptions& o;
  DomainMesh mesh;
  FNO model{nullptr};
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<dist::GradientSync> sync;  // over every rank
  std::unique_ptr<offload::Offloader> offloader;
  std::shared_ptr<BandTraffic> traffic = std::make_shared<BandTraffic>();
  bool traced = false;  // --trace: the first row's
  H1Loss loss{H1LossOptions().d(static_cast<int64_t>(o.model.n_modes().size()))};

  DomainRunner(const BenchOptions& opts, std::shared_ptr<dist::Group> world)
      : o(opts), mesh(make_domain_mesh(world, opts.domain_parallel)) {
    torch::manual_seed(0);
    model = FNO(o.model);
    model->to(torch::kCUDA);
    optimizer = std::make_unique<AdamW>(model->parameters(), AdamWOptions(8e-3).weight_decay(1e-4));
    mesh.world->broadcast_from_main(model->parameters());
    sync = std::make_unique<dist::GradientSync>(mesh.world, model->parameters());
    sync->set_hooks(false);  // pack, reduce, unpack after each step
    offloader = std::make_unique<offload::Offloader>(
        offload_settings(o.offload, PlanCacheText::kDirectory).options);
    offloader->exclude(*model);
  }

  std::vector<int64_t> shape(int64_t batch, int64_t channels, int64_t res, int64_t rows) const {
    std::vector<int64_t> s{batch, channels};
    const size_t dims = o.model.n_modes().size();
    for (size_t d = 0; d < dims; ++d) {
      s.push_back(d == 0 ? rows : d == 2 && o.time_length > 0 ? o.time_length : res);
    }
    return s;
  }

  void free_memory() {
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

  // Rank 0 alone: one GPU's step on the whole sample, auto's fastest plan.
  void one_gpu(BenchRow& row, Precision precision, int64_t res) {
    if (mesh.world->is_main()) {
      row.one_gpu_status = status_of([&] {
        auto settings = offload_settings(o.offload, PlanCacheText::kDirectory);
        settings.policy = offload::Policy::of(offload::Policy::Kind::kAuto);
        OffloadedStep step(model, settings);
        const auto loss_fn = [this](const at::Tensor& out, const at::Tensor& y) {
          return loss(out, y);
        };
        // fp16 as fno_train's step: scaled loss, unscale and check, update.
        std::optional<GradScaler> scaler;
        if (needs_loss_scaling(precision)) scaler.emplace(GradScalerOptions(), torch::kCUDA);
        TrainStep train(step, *optimizer, loss_fn, scaler ? &*scaler : nullptr);
        torch::manual_seed(1);
        const auto x =
            torch::randn(shape(row.batch, o.model.in_channels(), res, res), torch::kCUDA);
        const auto y =
            torch::randn(shape(row.batch, o.model.out_channels(), res, res), torch::kCUDA);
        for (int64_t i = 0; i < o.warmup; ++i) train.run(x, y);
        std::vector<double> ms;
        for (int64_t i = 0; i < o.steps; ++i) ms.push_back(timed([&] { train.run(x, y); }));
        row.ms_per_step_one_gpu = median_ms(ms);
      });
      free_memory();
    }
    mesh.world->barrier();
    row.ms_per_step_one_gpu = mesh.world->all_reduce_sum({row.ms_per_step_one_gpu})[0];
    // The baseline's updates were rank 0's alone: every rank takes its weights again.
    mesh.world->broadcast_from_main(model->parameters());
  }

  // This rank's estimates' context: what it holds now, its gradients, its window.
  TiledContext context() const {
    TiledContext ctx;
    ctx.base_bytes = static_cast<int64_t>(
        c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device())
            .allocated_bytes[0]
            .current);
    for (const auto& p : model->parameters()) ctx.grad_bytes += static_cast<int64_t>(p.nbytes());
    ctx.window = offloader->options().max_inflight_bytes();
    return ctx;
  }

  // This rank's pinned host budget: the host's pinnable memory is shared by the ranks on it.
  int64_t host_budget() const {
    return o.offload.host_memory_limit > 0 ? o.offload.host_memory_limit
                                           : pinnable_host_bytes(0) / mesh.world->local_size();
  }

  // Rank 0's kCandidates fastest estimated tiled plans of its band, the same
  // on every rank (empty: none fits rank 0's budget).
  std::vector<TiledChoice> candidates(const std::vector<int64_t>& band_shape) {
    const size_t width = 4 + static_cast<size_t>(o.model.n_layers());
    std::vector<double> mine(1 + kCandidates * width, 0.0);
    if (mesh.world->is_main()) {
      const auto found =
          tiled_candidates(model, band_shape, resolve_gpu_budget(o.offload.gpu_memory_limit),
                           host_budget(), context(), kCandidates);
      mine[0] = static_cast<double>(found.size());
      for (size_t k = 0; k < found.size(); ++k) {
        const auto v = encode_tiled_choice(found[k], o.model.n_layers());
        std::copy(v.begin(), v.end(), mine.begin() + static_cast<std::ptrdiff_t>(1 + k * width));
      }
    }
    const auto all = mesh.world->all_reduce_sum(mine);
    std::vector<TiledChoice> out;
    for (size_t k = 0; k < static_cast<size_t>(all[0] + 0.5); ++k) {
      const auto first = all.begin() + static_cast<std::ptrdiff_t>(1 + k * width);
      out.push_back(decode_tiled_choice(
          std::vector<double>(first, first + static_cast<std::ptrdiff_t>(width))));
    }
    return out;
  }

  // Whether `c` fits this rank's own budgets for its band (estimated).
  bool fits(const TiledChoice& c, const std::vector<int64_t>& band_shape) const {
    const auto e = estimate_tiled(model, band_shape, c.plan, c.micro_batches, context());
    return e.peak_bytes <= resolve_gpu_budget(o.offload.gpu_memory_limit) &&
           e.host_bytes <= host_budget();
  }

  BenchRow run(Precision precision, int64_t res, int64_t batch) {
    BenchRow row;
    row.policy = "domain " + std::to_string(mesh.n);
    row.precision = to_string(precision);
    row.resolution = res;
    row.batch = batch;
    row.world_size = mesh.world->size();
    row.domain_parallel = mesh.n;
    if (o.model.n_modes().size() == 3) row.time_length = o.time_length;
    const MatmulPrecisionGuard matmul(precision);
    model->options.compute_dtype(compute_dtype(precision));
    if (o.domain_baseline) one_gpu(row, precision, res);
    row.status = status_of([&] { measure(row, precision, res); });
    free_memory();
    model->options.compute_dtype(torch::kFloat);
    return row;
  }

  void measure(BenchRow& row, Precision precision, int64_t res) {
    const auto full = shape(row.batch, o.model.in_channels(), res, res);
    const std::vector<int64_t> grid(full.begin() + 2, full.end());
    const auto why = domain_unsupported(model, grid, mesh.n);
    TORCH_CHECK(why.empty(), why);
    const auto band = make_band(mesh, res, traffic);
    const int64_t rows = mesh.n > 1 ? band_rows(res, mesh.n, band.rank).second : res;
    const auto band_shape = shape(row.batch, o.model.in_channels(), res, rows);
    // The whole band first (the least compute, where it fits), then the tiled plans.
    std::vector<BandPlan> found{BandPlan{true, {}}};
    for (auto& c : candidates(band_shape)) found.push_back(BandPlan{false, std::move(c)});
    torch::manual_seed(1 + mesh.world->rank());
    const auto x = torch::randn(band_shape, torch::kCUDA);
    const auto y = torch::randn(shape(row.batch, o.model.out_channels(), res, rows), torch::kCUDA);
    TiledRunner runner(model, offloader.get());
    runner.set_band(band);
    // fp16 as fno_train's band step: the loss scaled before backward; the
    // gradients (each rank's band's share until added up) unscaled and
    // checked, and the skip decided alike on every rank.
    std::optional<GradScaler> scaler;
    if (needs_loss_scaling(precision)) {
      scaler.emplace(GradScalerOptions(), torch::kCUDA);
      scaler->set_found_inf_sum([world = mesh.world](torch::Tensor& found) {
        auto on = found.to(world->device());
        world->all_reduce_sum(on);
        found.copy_(on);
      });
    }
    const auto loss_fn = [&](const at::Tensor& out, const at::Tensor& yy) {
      const auto l = band_rel_loss(loss, band, out, yy);
      return scaler ? scaler->scale(l) : l;
    };
    // One band step of `choice` (collective: the exchanges, the gradients' all-reduce).
    const auto step = [&](const BandPlan& choice) {
      for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
      offloader->begin_step();
      auto l = (choice.whole ? runner.step_whole(x, y, loss_fn, /*mean=*/false)
                             : runner.step(choice.tiled, x, y, loss_fn, /*mean=*/false))
                   .detach();
      offloader->end_step();
      sync->pack();
      sync->reduce();
      sync->unpack();
      if (!scaler) {
        optimizer->step();
      } else {
        if (scaler->unscale(model->parameters())) optimizer->step();
        scaler->update();
        l = scaler->unscaled(l);
      }
      sync->drain();  // (the sums were ordered on the stream, the update queued behind them)
      return l;
    };
    const auto choice = search(found, band_shape, runner, step, x, y, row);
    std::vector<at::Tensor> losses;  // read once the timed steps are done
    for (int64_t i = 0; i < o.warmup; ++i) step(choice);
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
    *traffic = BandTraffic{};
    std::vector<double> ms;
    for (int64_t i = 0; i < o.steps; ++i) {
      ms.push_back(timed([&] { losses.push_back(step(choice)); }));
    }
    for (const auto& l : losses) row.losses.push_back(l.item<double>());
    finish(row, median_ms(ms), full);
    if (!o.trace_path.empty() && !traced) {
      // One more step, rank 0's traced (the figures above are untraced).
      traced_step(o.trace_path, mesh.world->is_main(), [&] { step(choice); });
      traced = true;
    }
  }

  // The whole band's probe (CollectiveSteps::probe): its step's tensors on this
  // rank alone, the band as a grid of its own rows, no exchanges; throws as a
  // step that runs out of memory, or offload::BudgetError when its peak leaves
  // less than 5% of this rank's room, so that no rank starts a whole band's
  // step that another cannot finish (its exchanges would wait).
  // x: [B, Cin, n, *S'], y: [B, Cout, n, *S']
  void probe_whole_band(const at::Tensor& x, const at::Tensor& y) {
    const auto device = c10::cuda::current_device();
    torch::cuda::synchronize();
    const auto held = [&] {
      return static_cast<int64_t>(
          c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].current);
    };
    const int64_t base = held();
    const int64_t limit = o.offload.gpu_memory_limit;
    const int64_t room = limit > 0 ? limit - base : resolve_gpu_budget(0);
    c10::cuda::CUDACachingAllocator::resetPeakStats(device);
    try {
      loss(model->forward(x), y).backward();
      torch::cuda::synchronize();
    } catch (...) {
      free_memory();
      throw;
    }
    const auto peak = static_cast<int64_t>(
        c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].peak);
    free_memory();
    if (static_cast<double>(peak - base) > 0.95 * static_cast<double>(room)) {
      throw offload::BudgetError("the whole band's probe peaked at " +
                                 offload::format_bytes(peak - base) + " of " +
                                 offload::format_bytes(room));
    }
  }

  // auto's measured search among the candidates, on every rank together
  // (collective_search): each fits every rank's own budget (estimated, then
  // as measured; the whole band: its probe on every rank, before its first
  // step), is trial-stepped by all, and the fastest slowest-rank time wins.
  // The row's plan names the choice and every candidate's time.
  template <class Step>
  BandPlan search(const std::vector<BandPlan>& found, const std::vector<int64_t>& band_shape,
                  TiledRunner& runner, const Step& step, const at::Tensor& x, const at::Tensor& y,
                  BenchRow& row) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t gpu_budget = resolve_gpu_budget(o.offload.gpu_memory_limit);
    std::vector<std::string> texts;
    for (const auto& c : found) texts.push_back(c.text());
    CollectiveSteps steps;
    steps.fits = [&](int64_t i) {
      const auto& c = found[static_cast<size_t>(i)];
      return c.whole || fits(c.tiled, band_shape);
    };
    steps.probe = [&](int64_t i) {
      if (found[static_cast<size_t>(i)].whole) probe_whole_band(x, y);
    };
    steps.step = [&](int64_t i) {
      const auto device = c10::cuda::current_device();
      torch::cuda::synchronize();
      c10::cuda::CUDACachingAllocator::resetPeakStats(device);
      const double ms = timed([&] { step(found[static_cast<size_t>(i)]); });
      const auto peak = static_cast<int64_t>(
          c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].peak);
      if (o.offload.gpu_memory_limit > 0 && peak > gpu_budget) {
        throw offload::BudgetError("peaked at " + offload::format_bytes(peak));
      }
      return ms;
    };
    steps.done = [&](int64_t) {
      runner.clear();
      free_memory();
    };
    steps.fatal = [](const std::exception& e) {
      return dynamic_cast<const dist::Error*>(&e) != nullptr;  // the ranks can no longer step
    };
    const auto c = collective_search(
        mesh.world->rank(), mesh.world->size(), texts, steps,
        [this](const std::vector<double>& v) { return mesh.world->all_reduce_sum(v); },
        CollectiveSearchOptions().seconds(o.offload.search_seconds));
    row.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    row.plan = c.summary();
    TORCH_CHECK(c.chosen >= 0, "no plan of the bands runs on every rank: ", row.plan);
    return found[static_cast<size_t>(c.chosen)];
  }

  // The row's figures from this rank's median: every rank's, the bytes.
  void finish(BenchRow& row, double mine, const std::vector<int64_t>& full) {
    std::vector<double> all(static_cast<size_t>(mesh.world->size()), 0.0);
    all[static_cast<size_t>(mesh.world->rank())] = mine;
    row.rank_ms = mesh.world->all_reduce_sum(all);
    row.ms_per_step = *std::max_element(row.rank_ms.begin(), row.rank_ms.end());
    const double groups = static_cast<double>(mesh.world->size() / mesh.n);
    row.samples_per_s = 1e3 * static_cast<double>(row.batch) * groups / row.ms_per_step;
    if (row.ms_per_step_one_gpu > 0) {
      row.speedup = row.ms_per_step_one_gpu / row.ms_per_step * groups;
      row.scaling_efficiency = row.speedup / static_cast<double>(mesh.world->size());
    }
    const auto steps = std::max<int64_t>(o.steps, 1);
    row.domain_payload_bytes = traffic->bytes / steps;
    row.domain_bytes_sent = traffic->sent_bytes(mesh.n) / steps;
    row.domain_sums = static_cast<double>(traffic->sums) / static_cast<double>(steps);
    row.domain_host_waits = static_cast<double>(traffic->host_waits) / static_cast<double>(steps);
    row.spectra_bytes = 2 * o.model.n_layers() * spectrum_bytes(model, full);
    int64_t grads = 0;
    for (const auto& p : model->parameters()) grads += static_cast<int64_t>(p.nbytes());
    const int64_t w = mesh.world->size();
    row.gradient_bytes_sent = w > 1 ? 2 * (w - 1) * grads / w : 0;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
    row.peak_allocated = stats.allocated_bytes[0].peak;
    row.peak_reserved = stats.reserved_bytes[0].peak;
  }
};

}  // namespace

std::vector<BenchRow> run_domain_rows(const BenchOptions& o, std::shared_ptr<dist::Group> world,
                                      const std::function<void(const BenchRow&)>& log) {
  DomainRunner runner(o, std::move(world));
  std::vector<BenchRow> rows;
  for (const auto precision : o.precisions) {
    for (const auto res : o.resolutions) {
      for (const auto batch : o.batches) {
        rows.push_back(runner.run(precision, res, batch));
        log(rows.back());
      }
    }
  }
  return rows;
}

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace fno
