// Hdf5SlabReader: a hyperslab of samples x rows of one array (fno_data/hdf5_slab.h).
#include <fno_data/hdf5_slab.h>

#include <hdf5.h>

#include <torch/torch.h>

#include <algorithm>
#include <mutex>

#include "hdf5_internal.h"

namespace fno::data {
using namespace h5;

struct Hdf5SlabReader::Impl {
  Context ctx;
  Handle file;
  Source src;
  bool matlab = false;
  std::vector<int64_t> shape;  // [N, C, *S]; AnyRank: as stored
  int64_t cache = 0;
  bool any_rank = false;

  // The row dim (the first spatial dim) in src.shape's order.
  size_t row_dim() const { return src.layout == Layout::kChannelsFirst ? 2 : 1; }
  void open(const std::string& key, Layout layout, int64_t max_cache_bytes);
  void open_any(const std::string& key, int64_t max_cache_bytes);
};

// An array of any rank as stored, its chunk cache max_cache_bytes at most.
// Under hdf5_mutex() and a QuietErrors.
void Hdf5SlabReader::Impl::open_any(const std::string& key, int64_t max_cache_bytes) {
  any_rank = true;
  file = open_read_only(ctx, ctx.path);
  src = open_source(ctx, file.get(), key, /*matlab=*/false, Layout::kGrid, "",
                    /*check_rank=*/false);
  shape.assign(src.shape.begin(), src.shape.end());
  double bytes = static_cast<double>(H5Tget_size(src.file_type.get()));
  for (hsize_t d : src.shape) bytes *= static_cast<double>(d);
  cache = std::max<int64_t>(int64_t{1} << 20,
                            static_cast<int64_t>(std::min(bytes, double(max_cache_bytes))));
  Handle dapl =
      ctx.check(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose, "cannot create dataset access properties");
  ctx.check(H5Pset_chunk_cache(dapl.get(), 12421, static_cast<size_t>(cache), 1.0),
            "cannot set the chunk cache of " + single_quoted(src.key));
  src.dataset = ctx.check(H5Dopen2(file.get(), src.key.c_str(), dapl.get()), H5Dclose,
                          "cannot open " + single_quoted(src.key));
}

// Under hdf5_mutex() and a QuietErrors.
void Hdf5SlabReader::Impl::open(const std::string& key, Layout layout, int64_t max_cache_bytes) {
  file = open_read_only(ctx, ctx.path);
  matlab = is_matlab_file(ctx, file.get(), ctx.path);
  src = open_source(ctx, file.get(), key, matlab, layout, "");
  if (std::find(src.shape.begin(), src.shape.end(), hsize_t{0}) != src.shape.end()) {
    ctx.fail("dataset " + single_quoted(src.key) + " is empty " + shape_text(src.shape));
  }
  // The chunk cache: one band of chunks along the rows, across the other dims.
  Handle dcpl = ctx.check(H5Dget_create_plist(src.dataset.get()), H5Pclose,
                          "cannot read the layout of " + single_quoted(src.key));
  if (H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
    std::vector<hsize_t> chunk(src.dims.size());
    if (H5Pget_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) < 0) {
      ctx.fail_h5("cannot read the chunks of " + single_quoted(src.key));
    }
    if (matlab) std::reverse(chunk.begin(), chunk.end());
    double band = static_cast<double>(H5Tget_size(src.file_type.get()));
    for (size_t d = 0; d < chunk.size(); ++d) {
      const hsize_t whole = (src.shape[d] + chunk[d] - 1) / chunk[d] * chunk[d];
      band *= static_cast<double>(d == 0 || d == row_dim() ? chunk[d] : whole);
    }
    cache = static_cast<int64_t>(std::min(band, static_cast<double>(max_cache_bytes)));
    cache = std::max<int64_t>(cache, int64_t{1} << 20);
    Handle dapl = ctx.check(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose,
                            "cannot create dataset access properties");
    ctx.check(H5Pset_chunk_cache(dapl.get(), 12421, static_cast<size_t>(cache), 1.0),
              "cannot set the chunk cache of " + single_quoted(src.key));
    src.dataset = ctx.check(H5Dopen2(file.get(), src.key.c_str(), dapl.get()), H5Dclose,
                            "cannot open " + single_quoted(src.key));
  }
  // [N, C, *S]
  const auto grid = src.grid();
  shape.assign({static_cast<int64_t>(grid[0]),
                src.channel_dim() >= 0
                    ? static_cast<int64_t>(src.shape[static_cast<size_t>(src.channel_dim())])
                    : 1});
  for (size_t d = 1; d < grid.size(); ++d) shape.push_back(static_cast<int64_t>(grid[d]));
}

Hdf5SlabReader::Hdf5SlabReader(const std::string& path, const std::string& key, Layout layout,
                               int64_t max_cache_bytes)
    : p_(std::make_unique<Impl>()) {
  p_->ctx.path = path;
  const Context& ctx = p_->ctx;
  ctx.require_file();
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  // A crash inside libhdf5 on a damaged file (see load_hdf5) becomes an error:
  // opening and one row of the first sample are tried in a child first.
  probe_in_child(ctx, [&] {
    Impl probe;
    probe.ctx = ctx;
    probe.open(key, layout, max_cache_bytes);
    std::vector<hsize_t> start(probe.src.shape.size(), 0), count = probe.src.shape;
    count[0] = 1;
    count[probe.row_dim()] = 1;
    read_hyperslab(ctx, probe.src, start, std::vector<hsize_t>(start.size(), 1), count,
                   probe.matlab);
  });
  p_->open(key, layout, max_cache_bytes);
}

Hdf5SlabReader::Hdf5SlabReader(const std::string& path, const std::string& key, AnyRank,
                               int64_t max_cache_bytes)
    : p_(std::make_unique<Impl>()) {
  p_->ctx.path = path;
  const Context& ctx = p_->ctx;
  ctx.require_file();
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  // As above: opening and the first value are tried in a child first.
  probe_in_child(ctx, [&] {
    Impl probe;
    probe.ctx = ctx;
    probe.open_any(key, max_cache_bytes);
    if (std::find(probe.src.shape.begin(), probe.src.shape.end(), hsize_t{0}) !=
        probe.src.shape.end()) {
      return;
    }
    const std::vector<hsize_t> start(probe.src.shape.size(), 0), one(start.size(), 1);
    read_hyperslab(ctx, probe.src, start, one, one, /*matlab=*/false);
  });
  p_->open_any(key, max_cache_bytes);
}

Hdf5SlabReader::~Hdf5SlabReader() {
  if (!p_) return;
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  p_->src = Source();
  p_->file.close();
}

const std::vector<int64_t>& Hdf5SlabReader::shape() const { return p_->shape; }
int64_t Hdf5SlabReader::cache_bytes() const { return p_->cache; }
const std::string& Hdf5SlabReader::path() const { return p_->ctx.path; }
const std::string& Hdf5SlabReader::key() const { return p_->src.key; }

torch::Tensor Hdf5SlabReader::read_box(const std::vector<int64_t>& start,
                                       const std::vector<int64_t>& count,
                                       const std::vector<int64_t>& stride) const {
  const Impl& m = *p_;
  const Context& ctx = m.ctx;
  const size_t rank = m.src.shape.size();
  std::vector<hsize_t> st(rank), ct(rank), sd(rank, 1);
  bool ok =
      start.size() == rank && count.size() == rank && (stride.empty() || stride.size() == rank);
  for (size_t d = 0; ok && d < rank; ++d) {
    if (!stride.empty()) ok = stride[d] >= 1;
    const int64_t step = stride.empty() ? 1 : stride[d];
    const int64_t last = start[d] + (count[d] - 1) * step;
    ok = ok && start[d] >= 0 && count[d] >= 1 && last < static_cast<int64_t>(m.src.shape[d]);
    if (!ok) break;
    st[d] = static_cast<hsize_t>(start[d]);
    ct[d] = static_cast<hsize_t>(count[d]);
    sd[d] = static_cast<hsize_t>(step);
  }
  if (!ok) {
    ctx.fail("dataset " + single_quoted(m.src.key) + ": a hyperslab outside its shape " +
             shape_text(m.src.shape));
  }
  torch::Tensor out;
  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    QuietErrors quiet;
    out = read_hyperslab(ctx, m.src, st, sd, ct, m.matlab);
  }
  if (!torch::isfinite(out).all().item<bool>()) {
    ctx.fail("NaN or Inf in " + single_quoted(m.src.key));
  }
  return out;
}

torch::Tensor Hdf5SlabReader::read(int64_t s0, int64_t s1, int64_t r0, int64_t r1) const {
  const Impl& m = *p_;
  const Context& ctx = m.ctx;
  if (m.any_rank) ctx.fail("dataset " + single_quoted(m.src.key) + " opened as stored: read_box");
  const int64_t n = m.shape[0], rows = m.shape[2];
  if (s0 < 0 || s1 <= s0 || s1 > n || r0 < 0 || r1 <= r0 || r1 > rows) {
    ctx.fail("dataset " + single_quoted(m.src.key) + ": samples [" + std::to_string(s0) + ", " +
             std::to_string(s1) + ") x rows [" + std::to_string(r0) + ", " + std::to_string(r1) +
             ") outside its " + std::to_string(n) + " samples x " + std::to_string(rows) + " rows");
  }
  const size_t rank = m.src.shape.size();
  std::vector<hsize_t> start(rank, 0), stride(rank, 1), count = m.src.shape;
  start[0] = static_cast<hsize_t>(s0);
  count[0] = static_cast<hsize_t>(s1 - s0);
  start[m.row_dim()] = static_cast<hsize_t>(r0);
  count[m.row_dim()] = static_cast<hsize_t>(r1 - r0);
  torch::Tensor out;
  {
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    QuietErrors quiet;
    out = read_hyperslab(ctx, m.src, start, stride, count, m.matlab);
  }
  out = to_channels(out, m.src.layout).contiguous();  // [b, C, rows, *S']
  const auto bad = ~torch::isfinite(out);
  if (bad.any().item<bool>()) {
    const int64_t first = bad.flatten(1).any(1).nonzero()[0].item<int64_t>();
    ctx.fail("NaN or Inf in " + single_quoted(m.src.key) + " (sample " +
             std::to_string(s0 + first) + ", rows [" + std::to_string(r0) + ", " +
             std::to_string(r1) + "))");
  }
  return out;
}

}  // namespace fno::data
