// Domain parallel: the ranks that share one sample (fno/band.h), in a 2D
// mesh with data parallel. With W ranks and N per sample, ranks
// [d N, (d + 1) N) hold sample group d (its domain group; rank d N + k holds
// band k), and the ranks of band k across the W / N sample groups form data
// group k. Parameter gradients are added over all W ranks (a band's are its
// share of its sample's; a sample group's add over its samples, as data
// parallel's do).
#pragma once

#include <fno/band.h>
#include <fno/fno.h>
#include <fno_train/distributed.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fno {

struct DomainMesh {
  std::shared_ptr<dist::Group> world;   // every rank
  std::shared_ptr<dist::Group> domain;  // the N ranks of this rank's samples
  std::shared_ptr<dist::Group> data;    // this band's ranks across the sample groups
  int64_t n = 1;                        // ranks per sample
  int64_t band() const { return domain ? domain->rank() : 0; }
  int64_t sample_group() const { return data ? data->rank() : 0; }
  int64_t sample_groups() const { return data ? data->size() : 1; }
};

/// The mesh of `world` with `n` ranks per sample: every rank calls it. Throws
/// std::invalid_argument (one line naming distributed.domain_parallel) when n
/// < 1 or does not divide the world size.
DomainMesh make_domain_mesh(std::shared_ptr<dist::Group> world, int64_t n);

/// Why `model` cannot split a grid of `grid` ([S0, ...]) into n bands of rows
/// (tiles of `tile_rows`, 0: any), or "": a 2D/3D model that runs tiled,
/// modes within the grid, every band at least the H1 loss's halo (2 rows)
/// and a tile.
std::string domain_unsupported(FNO model, const std::vector<int64_t>& grid, int64_t n,
                               int64_t tile_rows = 0);

/// What a band's sums carried: bytes given to the all-reduces (each rank's
/// payload) and their count. A ring all-reduce of P bytes over N ranks sends
/// 2 (N - 1) / N * P bytes from each rank (sent_bytes). host_waits: how many
/// times the host waited for a sum that the device had not finished
/// (dist::Group::all_reduce_sum_ordered and drain; Gloo: every sum).
struct BandTraffic {
  int64_t bytes = 0;
  int64_t sums = 0;
  int64_t host_waits = 0;
  int64_t sent_bytes(int64_t n) const { return n > 1 ? 2 * (n - 1) * bytes / n : 0; }
};

/// This rank's band of a grid of `rows` rows over mesh.domain (band_rows), its
/// sums over the domain group (ordered on the stream: Group::
/// all_reduce_sum_ordered; flush: Group::drain) counted in `traffic` (may be
/// null).
Band make_band(const DomainMesh& mesh, int64_t rows, std::shared_ptr<BandTraffic> traffic);

/// The complex values of one block's kept spectrum for a batch of `x_shape`
/// ([B, Cin, *S]) in bytes: B x hidden x k0 x k1 (x k2) complex64. A step adds
/// each block's over the ranks twice (forward and backward).
int64_t spectrum_bytes(FNO model, const std::vector<int64_t>& x_shape);

}  // namespace fno
