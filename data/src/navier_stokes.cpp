// Navier-Stokes records as training pairs (fno_data/navier_stokes.h).
#include <fno_data/navier_stokes.h>

#include <stdexcept>
#include <string>

namespace fno::data {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& msg) {
  throw std::runtime_error(path + ": " + msg);
}

void check_split(const torch::Tensor& u, int64_t t_in, int64_t t_out, const char* fn) {
  TORCH_CHECK(u.dim() == 4, fn, ": u must be [N, R, R, T], got shape ", u.sizes());
  TORCH_CHECK(t_in >= 1 && t_out >= 1 && t_in + t_out <= u.size(3), fn, ": t_in (", t_in,
              ") + t_out (", t_out, ") must be within the ", u.size(3), " records, each >= 1");
}

}  // namespace

torch::Tensor load_ns_records(const std::string& path, const NsLoadOptions& o) {
  if (o.subsample() < 1) fail(path, "subsample must be >= 1, got " + std::to_string(o.subsample()));
  if (o.t_in() < 1) fail(path, "t_in must be >= 1, got " + std::to_string(o.t_in()));
  if (o.t_out() == 0 || o.t_out() < -1) {
    fail(path, "t_out must be >= 1 or -1 (the rest), got " + std::to_string(o.t_out()));
  }
  auto u = load_hdf5(path, LoadOptions().x_key(o.key()).y_key(o.key()).n_samples(o.n_samples()))
               .x.squeeze(1);
  if (u.dim() != 4) {
    fail(path, "dataset '" + o.key() + "' has rank " + std::to_string(u.dim()) +
                   ", expected (N, R, R, T) records");
  }
  const int64_t t = u.size(3);
  const int64_t need = o.t_in() + (o.t_out() > 0 ? o.t_out() : 1);
  if (t < need) {
    fail(path, "dataset '" + o.key() + "' holds " + std::to_string(t) + " records; t_in " +
                   std::to_string(o.t_in()) + " and t_out " +
                   (o.t_out() > 0 ? std::to_string(o.t_out()) : std::string("(at least 1)")) +
                   " need " + std::to_string(need));
  }
  const int64_t k = o.subsample();
  if (k > 1) u = u.slice(1, 0, u.size(1), k).slice(2, 0, u.size(2), k).contiguous();
  return u;
}

FieldPairs ns_space_time_pairs(const torch::Tensor& u, int64_t t_in, int64_t t_out) {
  check_split(u, t_in, t_out, "ns_space_time_pairs");
  FieldPairs p;
  // [N, R, R, t_in] -> [N, t_in, R, R, 1] -> repeated over the t_out output times
  p.x = u.narrow(3, 0, t_in).permute({0, 3, 1, 2}).unsqueeze(4).expand(
      {u.size(0), t_in, u.size(1), u.size(2), t_out}).contiguous();
  p.y = u.narrow(3, t_in, t_out).unsqueeze(1).contiguous();
  return p;
}

FieldPairs ns_recurrent_pairs(const torch::Tensor& u, int64_t t_in, int64_t t_out) {
  check_split(u, t_in, t_out, "ns_recurrent_pairs");
  FieldPairs p;
  p.x = u.narrow(3, 0, t_in).permute({0, 3, 1, 2}).contiguous();
  p.y = u.narrow(3, t_in, t_out).permute({0, 3, 1, 2}).contiguous();
  return p;
}

}  // namespace fno::data
