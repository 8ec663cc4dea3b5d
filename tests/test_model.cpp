// FNO parity with neuraloperator 2.0.0: parameter count, state-dict names and
// shapes, forward outputs and parameter gradients, from golden files.
#include <fno/fno.h>
#include <fno/serialize.h>
#include <fno/tiled.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "golden.h"
// (internal to libfno: the LibTorch layers' whole-batch limit)
#include "../libfno/src/whole_batch.h"

using fno::test::golden;
using fno::test::golden_path;
using fno::test::golden_tensor;
using fno::test::out_path;
using fno::test::rel_err;

namespace {

constexpr double kForwardTol = 1e-5;
constexpr double kGradTol = 1e-4;

std::vector<int64_t> to_int_vector(const torch::Tensor& t) {
  auto c = t.to(torch::kInt64).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

std::vector<double> to_double_vector(const torch::Tensor& t) {
  auto c = t.to(torch::kDouble).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

// The model described by a golden case's cfg.* tensors.
fno::FNOOptions options_from(const std::string& io_file) {
  auto i64 = [&](const char* k) { return golden_tensor(io_file, k).item<int64_t>(); };
  auto f64 = [&](const char* k) { return golden_tensor(io_file, k).item<double>(); };
  const auto* use_mlp = golden(io_file).find("cfg.use_channel_mlp");  // (where set)
  return fno::FNOOptions(to_int_vector(golden_tensor(io_file, "cfg.n_modes")),
                         i64("cfg.in_channels"), i64("cfg.out_channels"),
                         i64("cfg.hidden_channels"))
      .n_layers(i64("cfg.n_layers"))
      .lifting_channel_ratio(f64("cfg.lifting_channel_ratio"))
      .projection_channel_ratio(f64("cfg.projection_channel_ratio"))
      .domain_padding(to_double_vector(golden_tensor(io_file, "cfg.domain_padding")))
      .use_channel_mlp(use_mlp == nullptr || use_mlp->item<bool>());
}

fno::FNO model_from(const std::string& state_file, const std::string& io_file) {
  fno::FNO model(options_from(io_file));
  fno::load_state_dict(*model, fno::load_tensor_dict(golden_path(state_file)));
  return model;
}

void check_case(const std::string& name, const std::string& state_name) {
  const std::string io = name + "_io.pt";
  const std::string state = state_name + "_state.pt";
  INFO("golden case ", name);
  auto model = model_from(state, io);
  CHECK(fno::count_params(*model) == golden_tensor(io, "cfg.n_params").item<int64_t>());

  auto x = golden_tensor(io, "x");
  auto y = model->forward(x);
  const double fwd = rel_err(y, golden_tensor(io, "y"));
  INFO("forward relative error ", fwd);
  CHECK(fwd <= kForwardTol);

  (y * golden_tensor(io, "w")).sum().backward();
  for (const auto& p : model->named_parameters()) {
    const auto ref = golden_tensor(io, "grad." + p.key());
    REQUIRE(p.value().grad().defined());
    const double g = rel_err(p.value().grad(), ref);
    INFO("gradient of ", p.key(), ": relative error ", g);
    CHECK(g <= kGradTol);
  }
}

}  // namespace

TEST_CASE("seed FNO has neuraloperator's 1,192,801 parameters") {
  fno::FNO model(fno::FNOOptions({16, 16}, 1, 1, 32).projection_channel_ratio(2));
  CHECK(fno::count_params(*model) == 1192801);
}

TEST_CASE("state-dict names and shapes equal neuraloperator's") {
  for (const std::string name : {"seed", "fno1d_even", "fno2d_even", "fno3d_even", "fno2d_padding",
                                 "fno2d_no_channel_mlp"}) {
    INFO("case ", name);
    const auto theirs = fno::load_tensor_dict(golden_path(name + "_state.pt"));
    fno::FNO model(options_from(name + "_io.pt"));
    const auto ours = fno::state_dict(*model);
    CHECK(ours.size() == theirs.size());
    for (const auto& item : theirs) {
      const auto* mine = ours.find(item.key());
      INFO("key ", item.key());
      REQUIRE(mine != nullptr);
      CHECK((mine->sizes() == item.value().sizes()));
      CHECK((mine->scalar_type() == item.value().scalar_type()));
    }
  }
}

TEST_CASE("forward and gradients match neuraloperator: 1D") {
  check_case("fno1d_even", "fno1d_even");
  check_case("fno1d_odd", "fno1d_odd");
}

TEST_CASE("forward and gradients match neuraloperator: 2D") {
  check_case("fno2d_even", "fno2d_even");
  check_case("fno2d_odd", "fno2d_odd");
  check_case("fno2d_small_grid", "fno2d_small_grid");
  check_case("fno2d_padding", "fno2d_padding");
}

TEST_CASE("spectral_init paper: the FNO paper's scripts' scale * rand, and a uniform bias") {
  torch::manual_seed(5);
  fno::FNO model(
      fno::FNOOptions({12, 12}, 3, 1, 20).n_layers(2).spectral_init(fno::SpectralInit::kPaper));
  const double scale = 1.0 / (20.0 * 20.0), bound = 1.0 / std::sqrt(20.0);
  for (const auto& m : *model->fno_blocks->convs) {
    const auto& conv = *m->as<fno::SpectralConv>();
    const auto w = torch::view_as_real(conv.weight->tensor);  // [..., 2]: real, imaginary
    for (int64_t part = 0; part < 2; ++part) {
      const auto p = w.select(-1, part);
      CHECK(p.min().item<double>() >= 0.0);
      CHECK(p.max().item<double>() < scale);
      // uniform on [0, scale): mean scale / 2, over thousands of entries
      CHECK(p.mean().item<double>() == doctest::Approx(scale / 2).epsilon(0.05));
    }
    CHECK(conv.bias.abs().max().item<double>() <= bound);
  }
  // neuraloperator's default: a normal of std sqrt(2 / 40), negative parts included.
  torch::manual_seed(5);
  fno::FNO other(fno::FNOOptions({12, 12}, 3, 1, 20).n_layers(2));
  const auto w =
      torch::view_as_real(other->fno_blocks->convs[0]->as<fno::SpectralConv>()->weight->tensor);
  CHECK(w.min().item<double>() < 0.0);
  CHECK(w.std().item<double>() == doctest::Approx(std::sqrt(2.0 / 40.0 / 2.0)).epsilon(0.05));
}

TEST_CASE("forward and gradients match neuraloperator: blocks without channel MLPs") {
  check_case("fno2d_no_channel_mlp", "fno2d_no_channel_mlp");
  // The blocks hold no channel-MLP parameters, and tiled execution says why it can't run.
  fno::FNO model(options_from("fno2d_no_channel_mlp_io.pt"));
  CHECK(model->fno_blocks->channel_mlp->size() == 0);
  CHECK(fno::tiled_unsupported(model).find("model.use_channel_mlp") != std::string::npos);
}

TEST_CASE("blocks without channel MLPs: single_gelu leaves out neuraloperator's second GELU") {
  const auto opts = fno::FNOOptions({6, 5}, 1, 1, 8).n_layers(3).use_channel_mlp(false);
  torch::manual_seed(2);
  fno::FNO twice(opts);
  fno::FNO once(fno::FNOOptions(opts).single_gelu(true));
  // The same state dict: the option is not part of it.
  fno::load_state_dict(*once, fno::state_dict(*twice));
  const auto x = torch::randn({2, 8, 12, 10});
  torch::NoGradGuard no_grad;
  for (int64_t i = 0; i < 3; ++i) {
    INFO("block ", i);
    const auto z2 = twice->fno_blocks->forward(x, i);
    const auto z1 = once->fno_blocks->forward(x, i);
    // Blocks hand on pre-activations: the next block's GELU is then the only one.
    CHECK(torch::allclose(z2, i < 2 ? torch::gelu(z1) : z1, 1e-6, 1e-6));
  }
  const auto u = torch::randn({2, 1, 12, 10});
  CHECK_FALSE(torch::allclose(twice->forward(u), once->forward(u), 1e-4, 1e-4));
  CHECK_THROWS_WITH(fno::FNO(fno::FNOOptions({6, 5}, 1, 1, 8).single_gelu(true)),
                    doctest::Contains("single_gelu applies to blocks without channel MLPs"));
}

TEST_CASE("forward and gradients match neuraloperator: 3D") {
  check_case("fno3d_even", "fno3d_even");
  check_case("fno3d_odd", "fno3d_odd");
}

TEST_CASE("forward and gradients match neuraloperator: seed model, even and odd grids") {
  check_case("seed", "seed");
  check_case("seed_odd", "seed");
}

TEST_CASE("one-sided domain padding: zeros after the grid, and a shift of symmetric padding") {
  // Blocks are equivariant under cyclic shifts, so padding 2p at the end is
  // padding p at both ends, shifted by p: the two models agree on the grid.
  auto make = [](std::vector<double> pad, fno::PaddingMode mode) {
    torch::manual_seed(3);
    return fno::FNO(fno::FNOOptions({6, 4}, 2, 1, 8)
                        .n_layers(2)
                        .domain_padding(std::move(pad))
                        .domain_padding_mode(mode));
  };
  auto one = make({0, 0.5}, fno::PaddingMode::kOneSided);
  auto both = make({0, 0.25}, fno::PaddingMode::kSymmetric);
  auto none = make({}, fno::PaddingMode::kSymmetric);
  torch::manual_seed(4);
  const auto x = torch::randn({3, 2, 9, 8});
  CHECK(one->padding_for({9, 8}) == std::vector<int64_t>{0, 4});
  const auto lifted = one->forward_lift(x);
  REQUIRE(lifted.sizes() == torch::IntArrayRef({3, 8, 9, 12}));
  CHECK(torch::equal(lifted.narrow(3, 0, 8), none->forward_lift(x)));
  CHECK(lifted.narrow(3, 8, 4).abs().max().item<double>() == 0.0);
  const auto y1 = one->forward(x), y2 = both->forward(x);
  REQUIRE(y1.sizes() == torch::IntArrayRef({3, 1, 9, 8}));
  CHECK(torch::allclose(y1, y2, 1e-5, 1e-5));
  CHECK(!torch::allclose(y1, none->forward(x), 1e-3, 1e-3));
}

TEST_CASE("SpectralConv with identity weights over all modes is the identity, odd sizes too") {
  // Keeping every mode with W[i,o] = delta(i,o) must reproduce the input exactly;
  // this fails if the inverse shift is wrong for odd sizes.
  torch::manual_seed(0);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{7}, {8}, {5, 7}, {6, 9}, {5, 4, 7}}) {
    INFO("grid ", torch::IntArrayRef(shape));
    const int64_t c = 3;
    std::vector<int64_t> modes;
    for (auto n : shape) modes.push_back(2 * n);  // more modes than the grid holds
    fno::SpectralConv conv(fno::SpectralConvOptions(c, c, modes).bias(false));
    {
      torch::NoGradGuard no_grad;
      auto& w = conv->weight->tensor;
      w.zero_();
      for (int64_t i = 0; i < c; ++i) w.select(0, i).select(0, i).fill_(1.0);
    }
    std::vector<int64_t> xs{2, c};
    xs.insert(xs.end(), shape.begin(), shape.end());
    auto x = torch::randn(xs);
    CHECK(rel_err(conv->forward(x), x) < 1e-6);
  }
}

TEST_CASE("model validates its options and inputs with messages naming the value") {
  CHECK_THROWS_WITH_AS(fno::FNO(fno::FNOOptions({16, 0}, 1, 1, 32)),
                       doctest::Contains("n_modes entries must be > 0, got 0"), c10::Error);
  CHECK_THROWS_WITH_AS(fno::FNO(fno::FNOOptions({4, 4, 4, 4}, 1, 1, 8)),
                       doctest::Contains("1, 2 or 3 entries, got 4"), c10::Error);
  CHECK_THROWS_WITH_AS(fno::FNO(fno::FNOOptions({4}, 1, 1, -3)),
                       doctest::Contains("hidden_channels must be > 0, got -3"), c10::Error);
  fno::FNO model(fno::FNOOptions({4, 4}, 1, 1, 8));
  CHECK_THROWS_WITH_AS(model->forward(torch::randn({2, 1, 8})),
                       doctest::Contains("expected a 4-d input"), c10::Error);
  CHECK_THROWS_WITH_AS(model->forward(torch::randn({2, 3, 8, 8})),
                       doctest::Contains("expected 1 input channels, got 3"), c10::Error);
}

TEST_CASE("load_state_dict reports missing, unexpected and mismatched keys") {
  fno::FNO model(fno::FNOOptions({4, 4}, 1, 1, 8).n_layers(2));
  auto sd = fno::state_dict(*model);
  fno::TensorDict missing;
  for (const auto& item : sd) {
    if (item.key() != "lifting.fcs.0.bias") missing.insert(item.key(), item.value());
  }
  CHECK_THROWS_WITH(fno::load_state_dict(*model, missing),
                    doctest::Contains("missing keys [lifting.fcs.0.bias]"));
  auto extra = sd;
  extra.insert("bogus.weight", torch::zeros({1}));
  CHECK_THROWS_WITH(fno::load_state_dict(*model, extra),
                    doctest::Contains("unexpected keys [bogus.weight]"));
  auto wrong = sd;
  wrong["lifting.fcs.0.bias"] = torch::zeros({5});
  CHECK_THROWS_WITH(fno::load_state_dict(*model, wrong),
                    doctest::Contains("'lifting.fcs.0.bias': shape [5]"));
}

TEST_CASE("C++ state dict round-trips through save_tensor_dict") {
  fno::FNO a(fno::FNOOptions({6, 6}, 1, 1, 8).n_layers(2));
  fno::FNO b(fno::FNOOptions({6, 6}, 1, 1, 8).n_layers(2));
  const auto path = out_path("cpp_state_roundtrip.pt");
  fno::save_tensor_dict(fno::state_dict(*a), path);
  fno::load_state_dict(*b, fno::load_tensor_dict(path));
  auto x = torch::randn({2, 1, 12, 12});
  CHECK(torch::equal(a->forward(x), b->forward(x)));
}

TEST_CASE("roundtrip: write a C++ checkpoint for the Python check") {
  // tests/python/check_cpp_checkpoint.py loads these into neuraloperator's FNO:
  // roundtrip_*.pt (the seed model) and roundtrip_no_mlp_*.pt (its blocks
  // without channel MLPs).
  for (const bool use_mlp : {true, false}) {
    const std::string stem = use_mlp ? "roundtrip_" : "roundtrip_no_mlp_";
    torch::manual_seed(1);
    fno::FNO model(
        fno::FNOOptions({16, 16}, 1, 1, 32).projection_channel_ratio(2).use_channel_mlp(use_mlp));
    auto x = torch::randn({2, 1, 21, 16});
    torch::Tensor y;
    {
      torch::NoGradGuard no_grad;
      y = model->forward(x);
    }
    fno::save_tensor_dict(fno::state_dict(*model), out_path(stem + "state.pt"));
    fno::TensorDict io;
    if (!use_mlp) io.insert("cfg.use_channel_mlp", torch::tensor(false));
    io.insert("x", x);
    io.insert("y", y);
    io.insert("cfg.n_modes", torch::tensor({16, 16}, torch::kInt64));
    io.insert("cfg.in_channels", torch::tensor(1, torch::kInt64));
    io.insert("cfg.out_channels", torch::tensor(1, torch::kInt64));
    io.insert("cfg.hidden_channels", torch::tensor(32, torch::kInt64));
    io.insert("cfg.n_layers", torch::tensor(4, torch::kInt64));
    io.insert("cfg.lifting_channel_ratio", torch::tensor(2.0, torch::kDouble));
    io.insert("cfg.projection_channel_ratio", torch::tensor(2.0, torch::kDouble));
    io.insert("cfg.domain_padding", torch::empty({0}, torch::kDouble));
    io.insert("cfg.n_params", torch::tensor(fno::count_params(*model), torch::kInt64));
    fno::save_tensor_dict(io, out_path(stem + "io.pt"));
    CHECK(fno::load_tensor_dict(out_path(stem + "state.pt")).size() ==
          fno::state_dict(*model).size());
  }
}

TEST_CASE("pointwise_linear with fused GELU: gradients equal plain autograd on long grids") {
  // N >= 65536 over more than whole_batch_bytes() (0 here) takes the
  // per-batch-entry backward (in-place GELU backward).
  for (const int64_t n : {4096, 70000}) {
    for (const bool gelu : {false, true}) {
      for (const int64_t limit : {fno::detail::kWholeBatchBytes, int64_t{0}}) {
        const fno::detail::WholeBatchBytesGuard whole(limit);
        INFO("N ", n, ", gelu ", gelu, ", whole-batch bytes ", limit);
        torch::manual_seed(1);
        const auto x = torch::randn({3, 5, n}, torch::requires_grad());
        const auto w = torch::randn({4, 5, 1}, torch::requires_grad());
        const auto b = torch::randn({4}, torch::requires_grad());
        const auto gy = torch::randn({3, 4, n});
        (fno::pointwise_linear(x, w, b, gelu) * gy).sum().backward();
        const auto xr = x.detach().clone().requires_grad_(true);
        const auto wr = w.detach().clone().requires_grad_(true);
        const auto br = b.detach().clone().requires_grad_(true);
        const auto h = gelu ? torch::gelu(xr) : xr;
        ((torch::einsum("oi,bin->bon", {wr.squeeze(-1), h}) + br.view({1, -1, 1})) * gy)
            .sum()
            .backward();
        CHECK(fno::test::rel_err(x.grad(), xr.grad()) <= 1e-5);
        CHECK(fno::test::rel_err(w.grad(), wr.grad()) <= 1e-5);
        CHECK(fno::test::rel_err(b.grad(), br.grad()) <= 1e-5);
      }
    }
  }
}

TEST_CASE(
    "channel_mlp2 in spatial chunks (long grids) equals plain autograd, forward and gradients") {
  // Beyond 2^20 points per entry, over more than whole_batch_bytes() (0
  // here), the MLP runs one entry at a time in spatial chunks of the grid.
  for (const int64_t n : {int64_t{4096}, (int64_t{1} << 21) + 4097}) {
    for (const bool gelu : {false, true}) {
      for (const int64_t limit : {fno::detail::kWholeBatchBytes, int64_t{0}}) {
        const fno::detail::WholeBatchBytesGuard whole(limit);
        INFO("N ", n, ", gelu ", gelu, ", whole-batch bytes ", limit);
        torch::manual_seed(2);
        const int64_t batch = n > 4096 ? 2 : 3;
        const auto x = torch::randn({batch, 3, n}, torch::requires_grad());
        const auto w1 = torch::randn({6, 3, 1}, torch::requires_grad());
        const auto b1 = torch::randn({6}, torch::requires_grad());
        const auto w2 = torch::randn({2, 6, 1}, torch::requires_grad());
        const auto b2 = torch::randn({2}, torch::requires_grad());
        const auto gy = torch::randn({batch, 2, n});
        const auto y = fno::channel_mlp2(x, w1, b1, w2, b2, gelu);
        (y * gy).sum().backward();
        std::vector<torch::Tensor> ref;
        for (const auto& t : {x, w1, b1, w2, b2})
          ref.push_back(t.detach().clone().requires_grad_(true));
        const auto a = gelu ? torch::gelu(ref[0]) : ref[0];
        const auto h =
            torch::einsum("oi,bin->bon", {ref[1].squeeze(-1), a}) + ref[2].view({1, -1, 1});
        const auto yr = torch::einsum("oi,bin->bon", {ref[3].squeeze(-1), torch::gelu(h)}) +
                        ref[4].view({1, -1, 1});
        (yr * gy).sum().backward();
        CHECK(fno::test::rel_err(y, yr) <= 1e-5);
        const std::vector<torch::Tensor> got{x, w1, b1, w2, b2};
        for (size_t i = 0; i < got.size(); ++i) {
          INFO("gradient ", i);
          CHECK(fno::test::rel_err(got[i].grad(), ref[i].grad()) <= 1e-4);
        }
      }
    }
  }
}

TEST_CASE("gelu_fork: two readers of GELU(x), the gradient of autograd's add and GeluBackward") {
  torch::manual_seed(11);
  const auto x0 = torch::randn({2, 3, 37});
  const auto w1 = torch::randn({2, 3, 37}), w2 = torch::randn({2, 3, 37});
  // Reference: GELU once, read twice; autograd adds the readers' gradients.
  auto xr = x0.clone().requires_grad_(true);
  const auto a = torch::gelu(xr);
  ((a * w1).sum() + (a.exp() * w2).sum()).backward();
  for (const int used : {0, 1, 2}) {
    INFO("readers with a gradient: ", used == 2 ? "both" : used == 0 ? "the first" : "the second");
    auto x = x0.clone().requires_grad_(true);
    const auto [a1, a2] = fno::gelu_fork(x);
    CHECK(torch::equal(a1, a));
    CHECK(torch::equal(a2, a));
    CHECK(a1.data_ptr() == a2.data_ptr());  // one storage
    if (used == 2) {
      ((a1 * w1).sum() + (a2.exp() * w2).sum()).backward();
      CHECK(torch::equal(x.grad(), xr.grad()));
    } else {
      (used == 0 ? (a1 * w1).sum() : (a2.exp() * w2).sum()).backward();
      auto xs = x0.clone().requires_grad_(true);
      const auto as = torch::gelu(xs);
      (used == 0 ? (as * w1).sum() : (as.exp() * w2).sum()).backward();
      CHECK(torch::equal(x.grad(), xs.grad()));
    }
  }
}

TEST_CASE("block_tail's LibTorch backward equals autograd, short grids and per batch entry") {
  // z = W2 GELU(W1 GELU(y1) + b1) + b2 + gate * act(x), y1 = W_skip act(x) + s;
  // from 65536 points, over more than whole_batch_bytes() (0 here), the
  // backward runs one batch entry at a time.
  for (const int64_t n : {4099, 70000}) {
    for (const bool gelu_input : {false, true}) {
      for (const int64_t limit : {fno::detail::kWholeBatchBytes, int64_t{0}}) {
        const fno::detail::WholeBatchBytesGuard whole(limit);
        INFO("N ", n, ", gelu_input ", gelu_input, ", whole-batch bytes ", limit);
        torch::manual_seed(4);
        std::vector<torch::Tensor> p{torch::randn({2, 4, n}), torch::randn({2, 4, n}),
                                     torch::randn({4, 4, 1}), torch::randn({3, 4, 1}),
                                     torch::randn({3}),       torch::randn({4, 3, 1}),
                                     torch::randn({4}),       torch::randn({1, 4, 1})};
        for (auto& t : p) t.requires_grad_(true);
        const auto gz = torch::randn({2, 4, n});
        const auto a = gelu_input ? torch::gelu(p[0]) : p[0];
        (fno::block_tail(p[0], a, p[1], p[2], p[3], p[4], p[5], p[6], p[7], gelu_input, true) * gz)
            .sum()
            .backward();
        std::vector<torch::Tensor> r;
        for (const auto& t : p) r.push_back(t.detach().clone().requires_grad_(true));
        const auto ar = gelu_input ? torch::gelu(r[0]) : r[0];
        const auto lin = [](const torch::Tensor& w, const torch::Tensor& v) {
          return torch::einsum("oi,bin->bon", {w.squeeze(-1), v});
        };
        const auto y1 = lin(r[2], ar) + r[1];
        const auto h = lin(r[3], torch::gelu(y1)) + r[4].view({1, -1, 1});
        const auto z = lin(r[5], torch::gelu(h)) + r[6].view({1, -1, 1}) + r[7] * ar;
        (z * gz).sum().backward();
        for (size_t i = 0; i < p.size(); ++i) {
          INFO("gradient ", i);
          CHECK(fno::test::rel_err(p[i].grad(), r[i].grad()) <= 1e-4);
        }
      }
    }
  }
}

TEST_CASE("channel_mlp2_backward gives the MLP's gradients without its forward, biases or none") {
  for (const bool gelu : {false, true}) {
    for (const bool bias : {true, false}) {
      INFO("gelu ", gelu, ", bias ", bias);
      torch::manual_seed(3);
      // x: [B, C, H, W], as a tile of a 2D grid
      const auto x = torch::randn({2, 3, 5, 7}, torch::requires_grad());
      const auto w1 = torch::randn({6, 3, 1}, torch::requires_grad());
      const auto b1 = bias ? torch::randn({6}, torch::requires_grad()) : torch::Tensor();
      const auto w2 = torch::randn({4, 6, 1}, torch::requires_grad());
      const auto b2 = bias ? torch::randn({4}, torch::requires_grad()) : torch::Tensor();
      const auto gy = torch::randn({2, 4, 5, 7});
      // The reference: the MLP through autograd.
      const auto a = gelu ? torch::gelu(x) : x;
      auto h = torch::einsum("oi,bihw->bohw", {w1.squeeze(-1), a});
      if (bias) h = h + b1.view({1, -1, 1, 1});
      auto y = torch::einsum("oi,bihw->bohw", {w2.squeeze(-1), torch::gelu(h)});
      if (bias) y = y + b2.view({1, -1, 1, 1});
      (y * gy).sum().backward();
      const auto g = fno::channel_mlp2_backward(x.detach(), gy, w1, b1, w2, b2, gelu, true);
      CHECK(g.dx.sizes() == x.sizes());
      CHECK(fno::test::rel_err(g.dx, x.grad()) <= 1e-5);
      CHECK(g.w1.sizes() == w1.sizes());
      CHECK(fno::test::rel_err(g.w1, w1.grad()) <= 1e-5);
      CHECK(fno::test::rel_err(g.w2, w2.grad()) <= 1e-5);
      CHECK(g.b1.defined() == bias);
      CHECK(g.b2.defined() == bias);
      if (bias) {
        CHECK(fno::test::rel_err(g.b1, b1.grad()) <= 1e-5);
        CHECK(fno::test::rel_err(g.b2, b2.grad()) <= 1e-5);
      }
      CHECK_FALSE(g.w1.requires_grad());
      CHECK_FALSE(
          fno::channel_mlp2_backward(x.detach(), gy, w1, b1, w2, b2, gelu, false).dx.defined());
      // A gradient that does not fit is one clear error.
      CHECK_THROWS_WITH_AS(
          fno::channel_mlp2_backward(x.detach(), gy.narrow(1, 0, 3), w1, b1, w2, b2, gelu, true),
          doctest::Contains("does not fit"), c10::Error);
    }
  }
}

TEST_CASE("channel_mlp2 and block_tail take undefined biases as zero") {
  torch::manual_seed(4);
  const auto x = torch::randn({2, 3, 5, 7}, torch::requires_grad());
  const auto w1 = torch::randn({6, 3, 1}, torch::requires_grad());
  const auto w2 = torch::randn({4, 6, 1}, torch::requires_grad());
  const auto none = torch::Tensor();
  const auto y = fno::channel_mlp2(x, w1, none, w2, none, /*gelu_input=*/false);
  const auto yz = fno::channel_mlp2(x, w1, torch::zeros({6}), w2, torch::zeros({4}), false);
  CHECK(torch::allclose(y, yz));
  y.sum().backward();
  CHECK(w1.grad().defined());
  CHECK(x.grad().defined());
  // block_tail: [B, C, H, W] with C = 4 channels, a 6-wide MLP
  const auto a = torch::randn({2, 4, 5, 7}), sp = torch::randn({2, 4, 5, 7});
  const auto ws = torch::randn({4, 4, 1}), t1 = torch::randn({6, 4, 1}),
             t2 = torch::randn({4, 6, 1});
  const auto gate = torch::randn({1, 4, 1, 1});
  const auto z = fno::block_tail(a, a, sp, ws, t1, none, t2, none, gate, false, true);
  const auto zz = fno::block_tail(a, a, sp, ws, t1, torch::zeros({6}), t2, torch::zeros({4}), gate,
                                  false, true);
  CHECK(torch::allclose(z, zz));
}
