#include <fno_train/domain.h>

#include <fno/tiled.h>

#include <algorithm>
#include <stdexcept>

namespace fno {

DomainMesh make_domain_mesh(std::shared_ptr<dist::Group> world, int64_t n) {
  const int64_t w = world ? world->size() : 1;
  if (n < 1 || w % n != 0) {
    throw std::invalid_argument("distributed.domain_parallel: " + std::to_string(n) +
                                " does not divide the world size " + std::to_string(w) +
                                " (the ranks that share one sample)");
  }
  DomainMesh mesh;
  mesh.world = world;
  mesh.n = n;
  if (!world || n == 1) return mesh;
  const int64_t rank = world->rank(), groups = w / n;
  const int64_t group = rank / n, band = rank % n;
  std::vector<int64_t> domain, data;
  for (int64_t k = 0; k < n; ++k) domain.push_back(group * n + k);
  for (int64_t g = 0; g < groups; ++g) data.push_back(g * n + band);
  mesh.domain = world->subgroup(domain, "domain" + std::to_string(group));
  mesh.data = world->subgroup(data, "data" + std::to_string(band));
  return mesh;
}

std::string domain_unsupported(FNO model, const std::vector<int64_t>& grid, int64_t n,
                               int64_t tile_rows) {
  if (n <= 1) return "";
  if (auto why = tiled_unsupported(model); !why.empty()) return "domain parallel: " + why;
  const auto& modes = model->options.n_modes();
  if (grid.size() != modes.size()) {
    return "domain parallel: a " + std::to_string(grid.size()) + "-d grid for a " +
           std::to_string(modes.size()) + "-d model";
  }
  for (size_t i = 0; i < grid.size(); ++i) {
    if (modes[i] > grid[i]) {
      return "domain parallel: model.n_modes[" + std::to_string(i) +
             "] = " + std::to_string(modes[i]) + " exceeds the grid's " + std::to_string(grid[i]) +
             " points";
    }
  }
  const int64_t thinnest = grid[0] / n;
  const int64_t least = std::max<int64_t>(2, tile_rows);
  if (thinnest < least) {
    return "domain parallel: " + std::to_string(grid[0]) + " rows over " + std::to_string(n) +
           " ranks gives bands of " + std::to_string(thinnest) + " rows, thinner than " +
           (tile_rows > 2 ? "a tile of " + std::to_string(tile_rows) + " rows"
                          : std::string("the loss's halo of 2 rows"));
  }
  return "";
}

Band make_band(const DomainMesh& mesh, int64_t rows, std::shared_ptr<BandTraffic> traffic) {
  Band b;
  b.ranks = mesh.n;
  b.rank = mesh.band();
  if (mesh.n <= 1 || !mesh.domain) return b;
  const auto [row0, count] = band_rows(rows, mesh.n, b.rank);
  (void)count;
  b.row0 = row0;
  b.grid_rows = rows;
  // Ordered on the stream (NCCL): the host waits at most one sum behind.
  b.sum = [group = mesh.domain, traffic](at::Tensor& t) {
    const int64_t waits = group->all_reduce_sum_ordered(t);
    if (traffic) {
      traffic->bytes += static_cast<int64_t>(t.nbytes());
      traffic->sums += 1;
      traffic->host_waits += waits;
    }
  };
  b.flush = [group = mesh.domain, traffic] {
    const int64_t waits = group->drain();
    if (traffic) traffic->host_waits += waits;
  };
  return b;
}

int64_t spectrum_bytes(FNO model, const std::vector<int64_t>& x_shape) {
  const auto& modes = model->options.n_modes();
  int64_t values = x_shape.at(0) * model->options.hidden_channels();
  for (size_t i = 0; i < modes.size(); ++i) {
    const int64_t s = x_shape.at(i + 2);
    const bool last = i + 1 == modes.size();
    values *= last ? std::min(modes[i] / 2 + 1, s / 2 + 1) : std::min(modes[i], s);
  }
  return values * 8;  // complex64
}

}  // namespace fno
