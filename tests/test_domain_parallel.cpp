// One sample across ranks (fno/band.h) on the CPU: N ranks as N threads of
// this process, a Gloo group over the loopback. Each rank holds a band of rows
// (uneven: the grid's rows are not a multiple of N) and runs the tiled step
// with its spectra added over the ranks; the loss and every parameter
// gradient (added over the ranks) must equal one process's whole-grid step.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <fno/band.h>
#include <fno/losses.h>
#include <fno/precision.h>
#include <fno/tiled.h>
#include <fno_engine/offload_step.h>
#include <fno_engine/rollout.h>
#include <fno_engine/tiled_plan.h>
#include <fno_train/distributed.h>
#include <fno_train/domain.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "golden.h"
#include "ranks.h"

using fno::test::rel_err;
using fno::test::run_ranks;

namespace {

std::map<std::string, torch::Tensor> grads(const fno::FNO& model) {
  std::map<std::string, torch::Tensor> g;
  for (const auto& p : model->named_parameters()) {
    const auto& t = p.value().grad();
    g[p.key()] = t.defined() ? (t.is_complex() ? torch::view_as_real(t) : t).clone()
                             : torch::zeros_like(torch::view_as_real_copy(p.value()));
  }
  return g;
}

using Loss =
    std::function<torch::Tensor(const fno::Band&, const torch::Tensor&, const torch::Tensor&)>;

// The whole-grid step of one process against N ranks' banded tiled steps
// (tile_rows > 0), or, tile_rows == 0, their whole bands with activations
// kept: the model's own forward under a BandGuard, the loss, backward.
// With `cuda`: rank r on GPU r with NCCL, the references on GPU 0.
void check_exact(const fno::FNOOptions& opts, const std::vector<int64_t>& shape, int64_t n,
                 int64_t tile_rows, const Loss& loss, bool cuda = false) {
  const auto device = [&](int64_t r) {
    return cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(r))
                : torch::Device(torch::kCPU);
  };
  torch::manual_seed(5);
  const auto x = torch::randn(shape).to(device(0));
  auto yshape = shape;
  yshape[1] = opts.out_channels();
  const auto y = torch::randn(yshape).to(device(0));
  torch::manual_seed(0);
  fno::FNO reference(opts);
  reference->to(device(0));
  const auto want_out = reference->forward(x);
  const auto want_loss = loss(fno::Band{}, want_out, y);
  want_loss.backward();
  const auto want = grads(reference);
  const int64_t rows = shape[2];
  // fp32's own noise: one process's tiled step against the whole-grid model
  // (for whole bands, the larger of two: tiles of band 0's rows, the spectra
  // summed band by band as the ranks sum them, and tiles of 3 rows). Where a
  // gradient is a sum with much cancellation (the last biases under H1), the
  // order of fp32 sums alone moves it by about 1e-5.
  std::map<std::string, double> floors;
  const auto tiles = tile_rows > 0 ? std::vector<int64_t>{tile_rows}
                                   : std::vector<int64_t>{fno::band_rows(rows, n, 0).second, 3};
  for (const int64_t t : tiles) {
    torch::manual_seed(0);
    fno::FNO model(opts);
    model->to(device(0));
    fno::TiledPlan plan;
    plan.tile_rows = t;
    fno::TiledStep step(model, plan);
    step.forward_backward(x, y, [&](const at::Tensor& out, const at::Tensor& yy) {
      return loss(fno::Band{}, out, yy);
    });
    for (const auto& [name, g] : grads(model)) {
      floors[name] = std::max(floors[name], rel_err(g, want.at(name)));
    }
  }

  std::vector<double> got_loss(static_cast<size_t>(n));
  std::vector<std::map<std::string, torch::Tensor>> got(static_cast<size_t>(n));
  std::vector<int64_t> sent(static_cast<size_t>(n));
  std::vector<double> out_err(static_cast<size_t>(n));
  // The ranks' models, made here: the threads would share the global generator.
  std::vector<fno::FNO> models;
  for (int64_t r = 0; r < n; ++r) {
    torch::manual_seed(0);
    models.emplace_back(opts);
    models.back()->to(device(r));
  }
  run_ranks(
      n,
      [&](int64_t r, std::shared_ptr<fno::dist::Group> g) {
        auto& model = models[static_cast<size_t>(r)];
        const auto [row0, count] = fno::band_rows(rows, n, r);
        const auto xr = x.narrow(2, row0, count).to(device(r));
        const auto yr = y.narrow(2, row0, count).to(device(r));
        fno::Band band;
        band.row0 = row0;
        band.grid_rows = rows;
        band.rank = r;
        band.ranks = n;
        band.sum = [&, g](at::Tensor& t) {
          sent[static_cast<size_t>(r)] += t.numel() * static_cast<int64_t>(t.element_size());
          g->all_reduce_sum_ordered(t);  // as make_band's (NCCL: on the stream)
        };
        band.flush = [g] { g->drain(); };
        fno::TiledPlan plan;
        plan.tile_rows = std::max<int64_t>(tile_rows, 1);
        fno::TiledStep step(model, plan);
        step.set_band(band);
        torch::Tensor l;
        if (tile_rows > 0) {
          l = step.forward_backward(xr, yr, [&](const at::Tensor& out, const at::Tensor& yy) {
            return loss(band, out, yy);
          });
        } else {
          const fno::BandGuard on_band(band);
          l = loss(band, model->forward(xr), yr);
          l.backward();
          band.drain();
        }
        for (auto& p : model->parameters()) {
          auto grad = p.mutable_grad();
          g->all_reduce_sum(grad);
        }
        const int64_t step_bytes = sent[static_cast<size_t>(r)];
        // Evaluation: the band's rows of the whole grid's output.
        torch::Tensor out;
        if (tile_rows > 0) {
          out = step.forward(xr);
        } else {
          const fno::BandGuard on_band(band);
          torch::NoGradGuard no_grad;
          out = model->forward(xr);
          band.drain();
        }
        out_err[static_cast<size_t>(r)] = rel_err(out, want_out.detach().narrow(2, row0, count));
        sent[static_cast<size_t>(r)] = step_bytes;
        got_loss[static_cast<size_t>(r)] = l.item<double>();
        got[static_cast<size_t>(r)] = grads(model);
      },
      cuda);
  // The spectra of every block, forward and backward: [B, hidden, k0, k1/2+1...] complex64.
  int64_t spectra = 0;
  for (int64_t j = 0; j < opts.n_layers(); ++j) {
    int64_t k = shape[0] * opts.hidden_channels() * 8;
    for (size_t i = 0; i < opts.n_modes().size(); ++i) {
      const auto m = opts.n_modes()[i];
      k *= i + 1 == opts.n_modes().size() ? m / 2 + 1 : m;
    }
    spectra += 2 * k;
  }
  double worst = 0;
  for (int64_t r = 0; r < n; ++r) {
    INFO("rank ", r, " of ", n);
    CHECK(got_loss[static_cast<size_t>(r)] ==
          doctest::Approx(want_loss.item<double>()).epsilon(1e-5));
    CHECK(out_err[static_cast<size_t>(r)] <= 1e-5);
    // The spectra, and the loss's few sums and halo rows, nothing grid-sized.
    CHECK(sent[static_cast<size_t>(r)] >= spectra);
    CHECK(sent[static_cast<size_t>(r)] < spectra + 64 * 1024);
    for (const auto& [name, w] : want) {
      const double floor = floors.at(name);
      INFO("gradient of ", name, "; one process's tiled step is ", floor, " off");
      REQUIRE(got[static_cast<size_t>(r)].count(name) == 1);
      CHECK(rel_err(got[static_cast<size_t>(r)].at(name), w) <= std::max(1e-5, 2 * floor));
      worst = std::max(worst, rel_err(got[static_cast<size_t>(r)].at(name), w));
    }
  }
  MESSAGE(n, " ranks, grid ", shape[2], " rows: worst gradient ", worst, " relative");
}

}  // namespace

TEST_CASE("band_rows splits a grid as evenly as can be") {
  CHECK(fno::band_rows(13, 3, 0) == std::pair<int64_t, int64_t>{0, 5});
  CHECK(fno::band_rows(13, 3, 1) == std::pair<int64_t, int64_t>{5, 4});
  CHECK(fno::band_rows(13, 3, 2) == std::pair<int64_t, int64_t>{9, 4});
  CHECK(fno::band_rows(8, 2, 1) == std::pair<int64_t, int64_t>{4, 4});
  CHECK_THROWS(fno::band_rows(2, 3, 0));
}

TEST_CASE("a sample split over 2 and 3 ranks: loss and gradients equal one process's (2D)") {
  const auto opts = fno::FNOOptions({6, 4}, 1, 1, 8).n_layers(3);
  const fno::LpLoss l2(fno::LpLossOptions().d(2));
  const fno::H1Loss h1(fno::H1LossOptions().d(2));
  const Loss by_l2 = [&](const fno::Band& b, const torch::Tensor& o, const torch::Tensor& y) {
    return fno::band_rel_loss(l2, b, o, y);
  };
  const Loss by_h1 = [&](const fno::Band& b, const torch::Tensor& o, const torch::Tensor& y) {
    return fno::band_rel_loss(h1, b, o, y);
  };
  for (const int64_t n : {2, 3}) {
    INFO(n, " ranks");
    check_exact(opts, {2, 1, 13, 10}, n, 2, by_l2);
    check_exact(opts, {2, 1, 13, 10}, n, 3, by_h1);
  }
}

TEST_CASE("a sample split over 2 and 3 ranks: loss and gradients equal one process's (3D)") {
  const auto opts = fno::FNOOptions({4, 4, 4}, 2, 1, 6).n_layers(2);
  const fno::H1Loss h1(fno::H1LossOptions().d(3));
  const fno::LpLoss l2(fno::LpLossOptions().d(3));
  for (const int64_t n : {2, 3}) {
    check_exact(opts, {1, 2, 11, 6, 7}, n, 2,
                [&](const fno::Band& b, const torch::Tensor& o, const torch::Tensor& y) {
                  return fno::band_rel_loss(h1, b, o, y);
                });
    check_exact(opts, {1, 2, 11, 6, 7}, n, 3,
                [&](const fno::Band& b, const torch::Tensor& o, const torch::Tensor& y) {
                  return fno::band_rel_loss(l2, b, o, y);
                });
  }
}

TEST_CASE("whole bands with activations kept over 2 and 3 ranks equal one process (2D, 3D)") {
  // The model's own forward under a BandGuard: tile_rows 0 in check_exact.
  const fno::LpLoss l2_2d(fno::LpLossOptions().d(2));
  const fno::H1Loss h1_2d(fno::H1LossOptions().d(2));
  const fno::LpLoss l2_3d(fno::LpLossOptions().d(3));
  const fno::H1Loss h1_3d(fno::H1LossOptions().d(3));
  const auto opts2 = fno::FNOOptions({6, 4}, 1, 1, 8).n_layers(3);
  const auto opts3 = fno::FNOOptions({4, 4, 4}, 2, 1, 6).n_layers(2);
  for (const int64_t n : {2, 3}) {
    INFO(n, " ranks");
    check_exact(opts2, {2, 1, 13, 10}, n, 0,
                [&](const fno::Band& b, const torch::Tensor& o, const torch::Tensor& y) {
                  return fno::band_rel_loss(l2_2d, b, o, y);
                });
    check_exact(opts2, {2, 1, 13, 10}, n, 0,
                [&](const fno::Band& b, const torch::Tensor& o, const torch::Tensor& y) {
                  return fno::band_rel_loss(h1_2d, b, o, y);
                });
    check_exact(opts3, {1, 2, 11, 6, 7}, n, 0,
                [&](const fno::Band& b, const torch::Tensor& o, const torch::Tensor& y) {
                  return fno::band_rel_loss(h1_3d, b, o, y);
                });
    check_exact(opts3, {1, 2, 11, 6, 7}, n, 0,
                [&](const fno::Band& b, const torch::Tensor& o, const torch::Tensor& y) {
                  return fno::band_rel_loss(l2_3d, b, o, y);
                });
  }
}

TEST_CASE("band losses over bands as thin as the halo equal the whole grid's (fp64)") {
  // Each rank's loss and gradient of its rows against the whole grid's
  // H1Loss.rel and L2, in float64: 7 rows over 3 ranks (bands of 3, 2, 2), 8
  // over 4 (2 each), 2D and 3D, the second dim periodic or not.
  for (const bool periodic_y : {true, false}) {
    for (const auto& shape :
         std::vector<std::vector<int64_t>>{{2, 2, 7, 6}, {2, 2, 8, 5}, {1, 2, 7, 5, 4}}) {
      const int64_t d = static_cast<int64_t>(shape.size()) - 2;
      const fno::H1Loss h1(fno::H1LossOptions().d(d).periodic_in_y(periodic_y));
      const fno::LpLoss l2(fno::LpLossOptions().d(d));
      const int64_t rows = shape[2], n = rows == 7 ? 3 : 4;
      INFO("grid ", rows, " rows over ", n, " ranks, ", d, "D, periodic in y: ", periodic_y);
      torch::manual_seed(3);
      const auto x = torch::randn(shape, torch::kDouble).requires_grad_(true);
      const auto y = torch::randn(shape, torch::kDouble);
      for (const bool by_h1 : {true, false}) {
        const auto want = by_h1 ? h1.rel(x, y) : l2.rel(x, y);
        const auto want_grad = torch::autograd::grad({want}, {x})[0];
        std::vector<double> got(static_cast<size_t>(n));
        auto got_grad = torch::zeros_like(x);
        run_ranks(n, [&](int64_t r, std::shared_ptr<fno::dist::Group> g) {
          const auto [row0, count] = fno::band_rows(rows, n, r);
          fno::Band band;
          band.rank = r;
          band.ranks = n;
          band.row0 = row0;
          band.grid_rows = rows;
          band.sum = [g](at::Tensor& t) { g->all_reduce_sum(t); };
          const auto xr = x.detach().narrow(2, row0, count).clone().requires_grad_(true);
          const auto yr = y.narrow(2, row0, count);
          const auto l =
              by_h1 ? fno::band_rel_loss(h1, band, xr, yr) : fno::band_rel_loss(l2, band, xr, yr);
          got[static_cast<size_t>(r)] = l.item<double>();
          got_grad.narrow(2, row0, count).copy_(torch::autograd::grad({l}, {xr})[0]);
        });
        for (const double v : got) CHECK(v == doctest::Approx(want.item<double>()).epsilon(1e-12));
        CHECK(rel_err(got_grad, want_grad) < 1e-12);
      }
    }
  }
}

TEST_CASE("BandGuard: what a band's forward refuses, and the mode's scope") {
  fno::Band band;
  band.row0 = 4;
  band.grid_rows = 8;
  CHECK(fno::current_band() == nullptr);
  {
    const fno::BandGuard on_band(band);
    REQUIRE(fno::current_band() != nullptr);
    CHECK(fno::current_band()->row0 == 4);
    fno::FNO one_d(fno::FNOOptions({4}, 1, 1, 4).n_layers(1));
    CHECK_THROWS_WITH(one_d->forward(torch::randn({1, 1, 4})),
                      doctest::Contains("a band of rows needs a 2D or 3D model"));
    fno::FNO padded(fno::FNOOptions({4, 4}, 1, 1, 4).n_layers(1).domain_padding({0.25}));
    CHECK_THROWS_WITH(padded->forward(torch::randn({1, 1, 4, 8})),
                      doctest::Contains("does not support domain padding, got 0.25"));
    fno::FNO model(fno::FNOOptions({4, 4}, 1, 1, 4).n_layers(1));
    CHECK_THROWS_WITH(model->forward(torch::randn({1, 1, 5, 8})),
                      doctest::Contains("a band of 5 rows at row 4 does not fit a grid of 8"));
  }
  CHECK(fno::current_band() == nullptr);
  band.grid_rows = 0;
  CHECK_THROWS_WITH(fno::BandGuard{band}, doctest::Contains("grid_rows must be set"));
  band.grid_rows = 8;
  band.ranks = 2;
  CHECK_THROWS_WITH(fno::BandGuard{band}, doctest::Contains("2 ranks but no sum"));
}

TEST_CASE("a sample split over 2 GPUs (NCCL, sums ordered on the stream) equals one process's") {
  if (torch::cuda::device_count() < 2) {
    MESSAGE("fewer than 2 CUDA GPUs: skipped");
    return;
  }
  const auto opts = fno::FNOOptions({6, 4}, 1, 1, 8).n_layers(3);
  const fno::H1Loss h1(fno::H1LossOptions().d(2));
  check_exact(
      opts, {2, 1, 13, 10}, 2, 3,
      [&](const fno::Band& b, const torch::Tensor& o, const torch::Tensor& y) {
        return fno::band_rel_loss(h1, b, o, y);
      },
      /*cuda=*/true);
  // The whole bands, activations kept.
  check_exact(
      opts, {2, 1, 13, 10}, 2, 0,
      [&](const fno::Band& b, const torch::Tensor& o, const torch::Tensor& y) {
        return fno::band_rel_loss(h1, b, o, y);
      },
      /*cuda=*/true);
}

TEST_CASE("band losses name what they cannot do") {
  const fno::H1Loss h1(fno::H1LossOptions().d(2).periodic_in_x(false));
  fno::Band band;
  band.ranks = 2;
  band.grid_rows = 8;
  band.sum = [](at::Tensor&) {};
  const auto x = torch::randn({1, 1, 4, 5});
  CHECK_THROWS_WITH(fno::band_rel_loss(h1, band, x, x),
                    doctest::Contains("must be periodic (periodic_in_x)"));
  CHECK_THROWS_WITH(fno::band_halo(band, x.narrow(2, 0, 1), 2),
                    doctest::Contains("thinner than the halo"));
}

TEST_CASE("a 2D mesh of 4 ranks, 2 per sample: domain and data subgroups") {
  std::vector<std::vector<double>> sums(4);
  std::vector<std::string> refused(4);
  run_ranks(4, [&](int64_t r, std::shared_ptr<fno::dist::Group> g) {
    try {
      fno::make_domain_mesh(g, 3);
    } catch (const std::invalid_argument& e) {
      refused[static_cast<size_t>(r)] = e.what();
    }
    const auto mesh = fno::make_domain_mesh(g, 2);
    CHECK(mesh.band() == r % 2);
    CHECK(mesh.sample_group() == r / 2);
    CHECK(mesh.sample_groups() == 2);
    auto t = torch::full({1}, static_cast<double>(r), torch::kDouble);
    mesh.domain->all_reduce_sum(t);
    auto u = torch::full({1}, static_cast<double>(r), torch::kDouble);
    mesh.data->all_reduce_sum(u);
    // A band's rows: 9 rows over 2 ranks, 5 and 4; its sums over the domain
    // group, counted (Gloo: each sum a host wait, nothing left to flush).
    auto traffic = std::make_shared<fno::BandTraffic>();
    const auto band = fno::make_band(mesh, 9, traffic);
    auto v = torch::full({3}, static_cast<double>(r), torch::kDouble);
    band.sum(v);
    band.drain();
    CHECK(traffic->sums == 1);
    CHECK(traffic->bytes == 24);
    CHECK(traffic->host_waits == 1);
    sums[static_cast<size_t>(r)] = {t.item<double>(), u.item<double>(),
                                    static_cast<double>(band.row0), v[2].item<double>()};
  });
  for (int64_t r = 0; r < 4; ++r) {
    INFO("rank ", r);
    CHECK(refused[static_cast<size_t>(r)] ==
          "distributed.domain_parallel: 3 does not divide the world size 4 (the ranks that share "
          "one sample)");
    const double group = static_cast<double>(r / 2), band = static_cast<double>(r % 2);
    CHECK(sums[static_cast<size_t>(r)][0] == 4 * group + 1);  // 2g + 2g + 1
    CHECK(sums[static_cast<size_t>(r)][1] == 2 * band + 2);   // b + b + 2
    CHECK(sums[static_cast<size_t>(r)][2] == (r % 2 == 0 ? 0 : 5));
    CHECK(sums[static_cast<size_t>(r)][3] == 4 * group + 1);  // the band's sum: the domain group's
  }
}

TEST_CASE("domain_unsupported names what a split cannot do") {
  const fno::FNO model(fno::FNOOptions({8, 8}, 1, 1, 4).n_layers(1));
  CHECK(fno::domain_unsupported(model, {64, 64}, 4).empty());
  CHECK(fno::domain_unsupported(model, {64, 64}, 1).empty());
  CHECK(fno::domain_unsupported(model, {64, 6}, 2).find("model.n_modes[1] = 8 exceeds") !=
        std::string::npos);
  CHECK(fno::domain_unsupported(model, {9, 64}, 8).find("thinner than the loss's halo") !=
        std::string::npos);
  CHECK(fno::domain_unsupported(model, {64, 64}, 4, 32).find("thinner than a tile of 32") !=
        std::string::npos);
  const fno::FNO one_d(fno::FNOOptions({8}, 1, 1, 4).n_layers(1));
  CHECK(fno::domain_unsupported(one_d, {64}, 2).find("2D or 3D") != std::string::npos);
}

// The engine's step under a plan on a band (OffloadedStep::set_band): what
// fno_train runs for distributed.domain_parallel. Its step (under each fixed
// policy, in chunks and micro-batches too, and auto) equals the whole grid's,
// and its forward, at the training grid and at another grid (a test set's,
// with its own band), the model's. none (and auto without CUDA) runs the
// whole band with activations kept: the loss reads the model's own output,
// with its autograd graph; the other policies run tiled plans, whose loss
// reads a detached output.
TEST_CASE("OffloadedStep on a band: the step and forwards equal one process's") {
  const auto opts = fno::FNOOptions({6, 4}, 1, 1, 8).n_layers(2);
  const fno::H1Loss h1(fno::H1LossOptions().d(2));
  torch::manual_seed(5);
  const auto x = torch::randn({4, 1, 13, 10}), y = torch::randn({4, 1, 13, 10});
  const auto other = torch::randn({3, 1, 9, 10});  // another grid: 9 rows
  torch::manual_seed(0);
  fno::FNO reference(opts);
  const auto want_loss = fno::band_rel_loss(h1, fno::Band{}, reference->forward(x), y);
  want_loss.backward();
  const auto want = grads(reference);
  torch::NoGradGuard no_grad;
  const auto want_out = reference->forward(x), want_other = reference->forward(other);
  const int64_t n = 3;
  std::vector<fno::FNO> models;
  for (int64_t r = 0; r < n; ++r) {
    torch::manual_seed(0);
    models.emplace_back(opts);
  }
  // Each fixed offload policy but none runs as its tiled plan
  // (tiled_choice_for_policy; on the CPU nothing moves to host memory), in
  // batch chunks (tiles of rows) and micro-batches; none and auto the whole band.
  struct Case {
    std::string policy;
    int64_t chunks, micro;
  };
  for (const auto& [policy, chunks, micro] : std::vector<Case>{{"none", 1, 1},
                                                               {"none", 1, 2},
                                                               {"slim", 2, 1},
                                                               {"recompute", 1, 1},
                                                               {"recompute", 3, 2},
                                                               {"blocks:2", 1, 1},
                                                               {"all", 2, 1},
                                                               {"recompute+offload", 1, 2},
                                                               {"auto", 1, 1}}) {
    INFO("policy ", policy, ", ", chunks, " chunk(s), ", micro, " micro-batch(es)");
    const auto k = static_cast<size_t>(n);
    const bool whole = policy == "none" || policy == "auto";
    std::vector<double> got_loss(k), out_err(k), other_err(k);
    std::vector<int> graphed(k, -1);
    std::vector<std::string> plans(k);
    std::vector<std::map<std::string, torch::Tensor>> got(k);
    run_ranks(n, [&](int64_t r, std::shared_ptr<fno::dist::Group> g) {
      torch::AutoGradMode grad_mode(true);
      auto& model = models[static_cast<size_t>(r)];
      for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
      const auto band_of = [&](int64_t rows) {
        fno::Band band;
        band.row0 = fno::band_rows(rows, n, r).first;
        band.grid_rows = rows;
        band.rank = r;
        band.ranks = n;
        band.sum = [g](at::Tensor& t) { g->all_reduce_sum(t); };
        return band;
      };
      const auto rows_of = [&](const torch::Tensor& t, const fno::Band& b) {
        return t.narrow(2, b.row0, fno::band_rows(b.grid_rows, n, r).second);
      };
      fno::OffloadSettings settings;
      settings.policy = fno::offload::parse_policy(policy);
      settings.chunks = chunks;
      settings.micro_batches = micro;
      fno::OffloadedStep step(model, settings);
      const auto band = band_of(13);
      step.set_band(band);
      CHECK_FALSE(step.plain());
      const auto l = step.forward_backward(
          rows_of(x, band), rows_of(y, band), [&](const at::Tensor& o, const at::Tensor& yy) {
            graphed[static_cast<size_t>(r)] = o.grad_fn() != nullptr ? 1 : 0;
            return fno::band_rel_loss(h1, band, o, yy);
          });
      plans[static_cast<size_t>(r)] = step.plan_text();
      for (auto& p : model->parameters()) g->all_reduce_sum(p.mutable_grad());
      got_loss[static_cast<size_t>(r)] = l.item<double>();
      got[static_cast<size_t>(r)] = grads(model);
      torch::NoGradGuard off;
      out_err[static_cast<size_t>(r)] =
          rel_err(step.forward(rows_of(x, band)), rows_of(want_out, band));
      const auto band9 = band_of(9);
      step.set_band(band9);
      other_err[static_cast<size_t>(r)] =
          rel_err(step.forward(rows_of(other, band9)), rows_of(want_other, band9));
      step.set_band(band);
    });
    for (int64_t r = 0; r < n; ++r) {
      INFO("rank ", r);
      CHECK(got_loss[static_cast<size_t>(r)] ==
            doctest::Approx(want_loss.item<double>()).epsilon(1e-5));
      CHECK(out_err[static_cast<size_t>(r)] <= 1e-5);
      CHECK(other_err[static_cast<size_t>(r)] <= 1e-5);
      CHECK(graphed[static_cast<size_t>(r)] == (whole ? 1 : 0));
      if (policy == "auto") {
        const auto rows = fno::band_rows(13, n, r).second;
        CHECK(plans[static_cast<size_t>(r)] ==
              "this rank's band of " + std::to_string(rows) + " rows, activations kept");
      }
      for (const auto& [name, w] : want) {
        INFO("gradient of ", name);
        // (fp32 sums in another order: the last biases' gradients cancel much)
        CHECK(rel_err(got[static_cast<size_t>(r)].at(name), w) <= 1e-4);
      }
    }
  }
}

// A step that runs the model several times (a recurrent rollout) on a band:
// OffloadedStep::forward_backward_composite runs each forward on the band's
// rows, activations kept; with a global loss it equals one process's.
TEST_CASE("a rollout on bands of 2 ranks equals one process's (forward_backward_composite)") {
  const auto opts = fno::FNOOptions({6, 4}, 2, 1, 8).n_layers(2);
  const fno::LpLoss l2(fno::LpLossOptions().d(2));
  torch::manual_seed(5);
  const auto x = torch::randn({2, 2, 13, 10}), y = torch::randn({2, 3, 13, 10});
  const auto rollout_loss = [&](const fno::Band& band, const fno::StepModel& model,
                                const torch::Tensor& xx, const torch::Tensor& yy) {
    return fno::rollout_loss(
        [&](const at::Tensor& o, const at::Tensor& t) {
          return fno::band_rel_loss(l2, band, o, t);
        },
        fno::rollout(model, xx, 3), yy);
  };
  torch::manual_seed(0);
  fno::FNO reference(opts);
  const auto want_loss = rollout_loss(
      fno::Band{}, [&](const at::Tensor& in) { return reference->forward(in); }, x, y);
  want_loss.backward();
  const auto want = grads(reference);
  const int64_t n = 2;
  std::vector<fno::FNO> models;
  for (int64_t r = 0; r < n; ++r) {
    torch::manual_seed(0);
    models.emplace_back(opts);
  }
  std::vector<double> got_loss(n);
  std::vector<std::map<std::string, torch::Tensor>> got(n);
  run_ranks(n, [&](int64_t r, std::shared_ptr<fno::dist::Group> g) {
    auto& model = models[static_cast<size_t>(r)];
    fno::Band band;
    std::tie(band.row0, std::ignore) = fno::band_rows(13, n, r);
    const int64_t rows = fno::band_rows(13, n, r).second;
    band.grid_rows = 13;
    band.rank = r;
    band.ranks = n;
    band.sum = [g](at::Tensor& t) { g->all_reduce_sum(t); };
    fno::OffloadSettings settings;
    settings.policy = fno::offload::parse_policy("none");
    fno::OffloadedStep step(model, settings);
    step.set_band(band);
    const auto l = step.forward_backward_composite(
        x.narrow(2, band.row0, rows), y.narrow(2, band.row0, rows),
        [&](const fno::OffloadedStep::ModelForward& f, const at::Tensor& xx, const at::Tensor& yy) {
          return rollout_loss(band, f, xx, yy);
        });
    for (auto& p : model->parameters()) g->all_reduce_sum(p.mutable_grad());
    got_loss[static_cast<size_t>(r)] = l.item<double>();
    got[static_cast<size_t>(r)] = grads(model);
  });
  for (int64_t r = 0; r < n; ++r) {
    INFO("rank ", r);
    CHECK(got_loss[static_cast<size_t>(r)] ==
          doctest::Approx(want_loss.item<double>()).epsilon(1e-5));
    for (const auto& [name, w] : want) {
      INFO("gradient of ", name);
      CHECK(rel_err(got[static_cast<size_t>(r)].at(name), w) <= 1e-5);
    }
  }
}

TEST_CASE("tiled_choice_for_policy: each fixed policy as a tiled plan of a band") {
  const auto choice = [](const std::string& policy, bool host, int64_t chunks = 1,
                         int64_t micro = 1) {
    return fno::tiled_choice_for_policy(fno::offload::parse_policy(policy), 3, 7, chunks, micro, 4,
                                        host);
  };
  // Where each block input lives, "host/device/..."; "" for TiledPlan's default.
  const auto inputs = [&](const std::string& policy, bool host) {
    std::string o;
    for (const auto p : choice(policy, host).plan.inputs)
      o += (o.empty() ? "" : "/") + to_string(p);
    return o;
  };
  for (const bool host : {true, false}) {
    INFO((host ? "with" : "without"), " pinned host memory");
    const std::string m = host ? "host" : "device";
    // none and slim: TiledPlan's default (block 0's input remade, the rest kept).
    CHECK(inputs("none", host).empty());
    CHECK(inputs("slim", host).empty());
    CHECK(inputs("all", host) == m + "/" + m + "/" + m);
    CHECK(inputs("recompute+offload", host) == m + "/" + m + "/" + m);
    CHECK(inputs("recompute", host) == "recompute/recompute/recompute");
    // blocks:K offloads the first K stages, the lifting first: block j is stage j + 1.
    CHECK(inputs("blocks:1", host) == "device/device/device");
    CHECK(inputs("blocks:2", host) == m + "/device/device");
    CHECK(inputs("blocks:3", host) == m + "/" + m + "/device");
    CHECK(inputs("blocks:9", host) == m + "/" + m + "/" + m);
  }
  for (const auto* p : {"none", "slim", "all", "blocks:2", "recompute", "recompute+offload"}) {
    INFO(p);
    const auto c = choice(p, true);
    CHECK(c.plan.gradient == fno::TilePlace::kDevice);
    CHECK(c.plan.keep_latest);
    CHECK(c.plan.tile_rows == 7);  // one tile
    CHECK(c.micro_batches == 1);
    // The round trip the band plan's texts take.
    CHECK(fno::parse_tiled_choice(c.to_string()).to_string() == c.to_string());
  }
  // Batch chunks become tiles of rows (none: one tile); micro-batches at most the batch.
  CHECK(choice("recompute", true, 2).plan.tile_rows == 4);
  CHECK(choice("slim", true, 3).plan.tile_rows == 3);
  CHECK(choice("all", true, 50).plan.tile_rows == 1);
  CHECK(choice("none", true, 2).plan.tile_rows == 7);
  CHECK(choice("none", true, 1, 2).micro_batches == 2);
  CHECK(choice("blocks:2", true, 1, 9).micro_batches == 4);
  CHECK_THROWS_WITH(choice("auto", true), doctest::Contains("auto has no fixed plan"));
}

// fp16 across ranks: a rank whose gradients are not finite skips the step on
// every rank (the found-inf flag added over the ranks), and the scales stay equal.
TEST_CASE("GradScaler across ranks: one rank's non-finite gradient skips the step everywhere") {
  for (const bool agree : {true, false}) {
    INFO((agree ? "with" : "without"), " the found-inf sum");
    std::vector<std::vector<int>> stepped(2);
    std::vector<std::vector<double>> scales(2);
    std::vector<int64_t> skipped(2);
    run_ranks(2, [&](int64_t r, std::shared_ptr<fno::dist::Group> g) {
      fno::GradScaler scaler(fno::GradScalerOptions().growth_interval(1));
      if (agree) scaler.set_found_inf_sum([g](torch::Tensor& f) { g->all_reduce_sum(f); });
      auto w = torch::zeros({3}, torch::requires_grad());
      auto z = torch::zeros({2}, torch::kComplexFloat).requires_grad_();
      const std::vector<torch::Tensor> params{w, z};
      for (int step = 0; step < 3; ++step) {
        w.mutable_grad() = torch::ones({3});
        z.mutable_grad() = torch::ones({2}, torch::kComplexFloat);
        // Step 1: rank 1's real gradient has an inf; step 2: rank 0's complex one a NaN.
        if (step == 1 && r == 1) w.mutable_grad()[1].fill_(std::numeric_limits<float>::infinity());
        if (step == 2 && r == 0) {
          z.mutable_grad()[0].fill_(
              c10::complex<float>(0, std::numeric_limits<float>::quiet_NaN()));
        }
        stepped[static_cast<size_t>(r)].push_back(scaler.unscale(params) ? 1 : 0);
        scaler.update();
        scales[static_cast<size_t>(r)].push_back(scaler.scale_value());
      }
      skipped[static_cast<size_t>(r)] = scaler.skipped_steps();
      if (agree) {
        CHECK_THROWS_WITH(scaler.unscale_on_device(params),
                          doctest::Contains("cannot add the found-inf flag over ranks"));
      }
    });
    if (agree) {
      for (size_t r = 0; r < 2; ++r) {
        INFO("rank ", r);
        CHECK(stepped[r] == std::vector<int>{1, 0, 0});
        CHECK(scales[r] == std::vector<double>{131072.0, 65536.0, 32768.0});
        CHECK(skipped[r] == 2);
      }
    } else {
      // Each rank alone: their decisions and scales part.
      CHECK(stepped[0] == std::vector<int>{1, 1, 0});
      CHECK(stepped[1] == std::vector<int>{1, 0, 1});
      CHECK(scales[0] != scales[1]);
    }
  }
}
