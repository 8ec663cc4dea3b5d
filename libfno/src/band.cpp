#include <fno/band.h>

#include <torch/torch.h>

#include <vector>

namespace fno {

namespace {

thread_local const Band* t_band = nullptr;

// A band in an autograd node's saved data (a capsule), for band_sum's backward.
struct BandHolder : torch::CustomClassHolder {
  explicit BandHolder(Band b) : band(std::move(b)) {}
  Band band;
};

// y = the sum of x over the ranks; dx = the sum of dy over the ranks.
class BandSumFn : public torch::autograd::Function<BandSumFn> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const c10::intrusive_ptr<BandHolder>& holder) {
    ctx->saved_data["band"] = c10::IValue::make_capsule(holder);
    auto y = x.clone(at::MemoryFormat::Contiguous);
    holder->band.sum(y);
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto holder =
        c10::static_intrusive_pointer_cast<BandHolder>(ctx->saved_data["band"].toCapsule());
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    auto g = grads[0].clone(at::MemoryFormat::Contiguous);
    holder->band.sum(g);
    return {g, at::Tensor()};
  }
};

}  // namespace

BandGuard::BandGuard(Band band) : band_(std::move(band)), previous_(t_band) {
  TORCH_CHECK(band_.ranks >= 1 && band_.rank >= 0 && band_.rank < band_.ranks, "BandGuard: rank ",
              band_.rank, " of ", band_.ranks);
  TORCH_CHECK(band_.grid_rows >= 1 && band_.row0 >= 0 && band_.row0 < band_.grid_rows,
              "BandGuard: a band at row ", band_.row0, " of a grid of ", band_.grid_rows,
              " rows (grid_rows must be set)");
  TORCH_CHECK(!band_.split() || band_.sum != nullptr, "BandGuard: ", band_.ranks,
              " ranks but no sum");
  t_band = &band_;
}

BandGuard::~BandGuard() { t_band = previous_; }

const Band* current_band() { return t_band; }

at::Tensor band_sum(const Band& band, const at::Tensor& x) {
  if (!band.split()) return x;
  TORCH_CHECK(band.sum != nullptr, "band_sum: ", band.ranks, " ranks but no sum");
  return BandSumFn::apply(x, c10::make_intrusive<BandHolder>(band));
}

std::pair<int64_t, int64_t> band_rows(int64_t rows, int64_t ranks, int64_t r) {
  TORCH_CHECK(ranks >= 1 && r >= 0 && r < ranks, "band_rows: rank ", r, " of ", ranks);
  TORCH_CHECK(rows >= ranks, "band_rows: a grid of ", rows, " rows cannot be split over ", ranks,
              " ranks");
  const int64_t base = rows / ranks, extra = rows % ranks;
  const int64_t row0 = r * base + std::min(r, extra);
  return {row0, base + (r < extra ? 1 : 0)};
}

namespace {

// The previous band's `last` rows and the next band's `first` rows (periodic),
// from every rank's own `first` and `last` ([B, C, k, *S'] each), detached.
std::pair<at::Tensor, at::Tensor> neighbour_rows(const Band& band, const at::Tensor& first,
                                                 const at::Tensor& last) {
  torch::NoGradGuard no_grad;
  if (!band.split()) return {last.detach(), first.detach()};  // one process: the wrap
  TORCH_CHECK(band.sum != nullptr, "band halo: ", band.ranks, " ranks but no sum");
  // Every rank's first and last rows, each in its own slot, added over ranks.
  auto shape = first.sizes().vec();
  shape.insert(shape.begin(), {band.ranks, 2});
  auto slots = torch::zeros(shape, first.options());
  slots[band.rank][0].copy_(first);
  slots[band.rank][1].copy_(last);
  band.sum(slots);
  const int64_t prev = (band.rank + band.ranks - 1) % band.ranks;
  const int64_t next = (band.rank + 1) % band.ranks;
  return {slots[prev][1], slots[next][0]};
}

void check_halo(int64_t n, int64_t k) {
  TORCH_CHECK(n >= k, "band halo: a band of ", n, " rows is thinner than the halo of ", k, " rows");
}

}  // namespace

at::Tensor band_halo(const Band& band, const at::Tensor& x, int64_t k) {
  const int64_t n = x.size(2);
  check_halo(n, k);
  const auto [before, after] = neighbour_rows(band, x.narrow(2, 0, k), x.narrow(2, n - k, k));
  torch::NoGradGuard no_grad;
  return torch::cat({before, x.detach(), after}, 2);
}

namespace {

at::Tensor reduce_all(const at::Tensor& x, Reduction r) {
  return (r == Reduction::kSum ? x.sum() : x.mean()).squeeze();
}

// The global loss from this rank's sums: `with_grad` ([K, B, C], depending on
// the rank's rows as the global sums do) and `own` ([K, B, C], the rank's
// share of the global sums, without gradient). Adds `own` over ranks, gets
// L = value(sums) and its gradient c w.r.t. the sums, and returns
// L + sum(c * (with_grad - detach(with_grad))): L's value, the exact gradient.
at::Tensor global_loss(const Band& band, const at::Tensor& with_grad, at::Tensor own,
                       const std::function<at::Tensor(const at::Tensor&)>& value) {
  own = own.detach().to(torch::kDouble).contiguous();
  if (band.split()) {
    TORCH_CHECK(band.sum != nullptr, "band loss: ", band.ranks, " ranks but no sum");
    band.sum(own);
  }
  at::Tensor l, c;
  {
    torch::AutoGradMode grad_mode(true);
    const auto s = own.detach().requires_grad_(true);
    l = value(s);
    c = torch::autograd::grad({l}, {s})[0];
  }
  const auto g = with_grad;
  const auto c_typed = c.to(g.scalar_type());
  return l.detach().to(g.scalar_type()) + (c_typed * (g - g.detach())).sum();
}

void check_band_input(const at::Tensor& x, const at::Tensor& y, int64_t d, const char* who) {
  TORCH_CHECK(x.sizes() == y.sizes(), who, ": prediction shape ", x.sizes(),
              " differs from target shape ", y.sizes());
  TORCH_CHECK(x.dim() == d + 2, who, ": a band loss takes [B, C, rows, *S'] with d=", d,
              " spatial dims, got shape ", x.sizes());
}

}  // namespace

at::Tensor band_rel_loss(const LpLoss& loss, const Band& band, const at::Tensor& x,
                         const at::Tensor& y) {
  if (!band.split()) return loss.rel(x, y);
  const auto& o = loss.options();
  check_band_input(x, y, o.d(), "band LpLoss");
  const auto p = static_cast<double>(o.p());
  const auto power = [&](const at::Tensor& t) {
    const auto f = t.flatten(2);
    return (o.p() % 2 == 0 ? f.pow(p) : f.abs().pow(p)).sum(-1);  // [B, C]
  };
  const auto num = power(x - y);
  const auto den = power(y).detach();
  const auto with_grad = torch::stack({num, torch::zeros_like(den)});
  const auto own = torch::stack({num.detach(), den});
  const double eps = o.eps();
  const auto reduction = o.reduction();
  return global_loss(band, with_grad, own, [&](const at::Tensor& s) {
    const double inv = 1.0 / p;
    const auto out = o.p() == 1 ? s[0] / (s[1] + eps) : s[0].pow(inv) / (s[1].pow(inv) + eps);
    return reduce_all(out, reduction);
  });
}

at::Tensor band_rel_loss(const H1Loss& loss, const Band& band, const at::Tensor& x,
                         const at::Tensor& y) {
  if (!band.split()) return loss.rel(x, y);
  const auto& o = loss.options();
  check_band_input(x, y, o.d(), "band H1Loss");
  TORCH_CHECK(o.periodic_in_x(),
              "band H1Loss: split over ranks, the first spatial dim must be periodic "
              "(periodic_in_x)");
  const int64_t d = o.d(), n = x.size(2);
  TORCH_CHECK(band.grid_rows >= n, "band H1Loss: grid_rows ", band.grid_rows, " < band rows ", n);
  const bool periodic[3] = {o.periodic_in_x(), o.periodic_in_y(), o.periodic_in_z()};
  // The grid step per dim over the whole grid, as H1Loss's uniform quadrature.
  const auto& m = o.measure();
  TORCH_CHECK(m.size() == 1 || static_cast<int64_t>(m.size()) == d,
              "band H1Loss: measure needs 1 or ", d, " entries, got ", m.size());
  std::vector<double> h(static_cast<size_t>(d));
  for (int64_t j = 0; j < d; ++j) {
    const double mj = m.size() == 1 ? m[0] : m[static_cast<size_t>(j)];
    h[static_cast<size_t>(j)] = mj / static_cast<double>(j == 0 ? band.grid_rows : x.size(2 + j));
  }
  const auto sq = [](const at::Tensor& t) { return t.flatten(2).pow(2).sum(-1); };  // [B, C]
  // The neighbours' two edge rows of x (detached: they are the neighbours' to
  // train) and of y; only these rows travel, and no full-band copy is made.
  at::Tensor x_before, x_after, y_before, y_after;
  check_halo(n, 2);
  {
    const int64_t c = x.size(1);
    const auto mine = [&](int64_t row0) {  // [B, 2C, 2, *S']
      return torch::cat({x.detach().narrow(2, row0, 2), y.detach().narrow(2, row0, 2)}, 1);
    };
    const auto [before, after] = neighbour_rows(band, mine(0), mine(n - 2));
    x_before = before.narrow(1, 0, c);  // the previous band's last two rows
    y_before = before.narrow(1, c, c);
    x_after = after.narrow(1, 0, c);  // the next band's first two rows
    y_after = after.narrow(1, c, c);
  }
  // Central differences along dim 0 of t at rows -1 .. n of the band, with
  // `before`/`after` the two rows either side: the rows 1 .. n-2 from the
  // band alone, and four thin edge pieces, rows {-1, 0} and {n-1, n}.
  struct Rows0 {
    at::Tensor inner, top, bottom;  // rows 1 .. n-2; rows -1, 0; rows n-1, n
  };
  const double h2 = 2.0 * h[0];
  const auto d0 = [&](const at::Tensor& t, const at::Tensor& before, const at::Tensor& after) {
    Rows0 r;
    r.inner = (t.narrow(2, 2, n - 2) - t.narrow(2, 0, n - 2)) / h2;
    const auto top = torch::cat({before, t.narrow(2, 0, 2)}, 2);        // rows -2 .. 1
    const auto bottom = torch::cat({t.narrow(2, n - 2, 2), after}, 2);  // rows n-2 .. n+1
    r.top = (top.narrow(2, 2, 2) - top.narrow(2, 0, 2)) / h2;
    r.bottom = (bottom.narrow(2, 2, 2) - bottom.narrow(2, 0, 2)) / h2;
    return r;
  };
  const auto diff = x - y;
  const auto dd0 = d0(diff, x_before - y_before, x_after - y_after);
  // This rank's share of the global sums: rows 0 .. n-1. The differences at
  // rows -1 and n are the neighbours' to count, but depend on this rank's
  // edge rows: they join the terms that carry the gradient.
  const auto num_mine =
      sq(diff) + sq(dd0.inner) + sq(dd0.top.narrow(2, 1, 1)) + sq(dd0.bottom.narrow(2, 0, 1));
  auto num_grad = num_mine + sq(dd0.top.narrow(2, 0, 1)) + sq(dd0.bottom.narrow(2, 1, 1));
  auto num_own = num_mine.detach();
  at::Tensor den;
  {
    torch::NoGradGuard no_grad;
    const auto y0 = d0(y, y_before, y_after);
    den = sq(y) + sq(y0.inner) + sq(y0.top.narrow(2, 1, 1)) + sq(y0.bottom.narrow(2, 0, 1));
  }
  for (int64_t j = 1; j < d; ++j) {
    const int64_t dim = 2 + j;
    const auto dd = finite_diff_first(diff, dim, h[static_cast<size_t>(j)], periodic[j]);
    const auto s = sq(dd);
    num_grad = num_grad + s;
    num_own = num_own + s.detach();
    den = den + sq(finite_diff_first(y, dim, h[static_cast<size_t>(j)], periodic[j]));
  }
  den = den.detach();
  const auto with_grad = torch::stack({num_grad, torch::zeros_like(den)});
  const auto own = torch::stack({num_own, den});
  const double eps = o.eps();
  const auto reduction = o.reduction();
  return global_loss(band, with_grad, own, [&](const at::Tensor& s) {
    return reduce_all(s[0].pow(0.5) / (s[1].pow(0.5) + eps), reduction);
  });
}

}  // namespace fno
