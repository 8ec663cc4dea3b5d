// The sample writer (Hdf5SampleWriter): float32 datasets written a few
// samples, or a band of rows, at a time into a temporary file, renamed at the
// end (never over a file).
#include <fno_data/darcy.h>

#include <hdf5.h>

#include <torch/types.h>

#include <fcntl.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "hdf5_internal.h"

namespace fno::data {
using namespace h5;

namespace {

/// One sample's chunk: chunk_shape's, or bands of rows (SampleWriterOptions).
std::vector<hsize_t> sample_chunk(const Context& ctx, const std::vector<hsize_t>& dims,
                                  const SampleWriterOptions& options, const std::string& what) {
  std::vector<hsize_t> one = dims;
  one[0] = 1;
  if (options.band_rows() == 0) return chunk_shape(one, sizeof(float));
  const auto dim = options.band_dim();
  if (dim < 1 || dim >= static_cast<int64_t>(dims.size())) {
    ctx.fail(what + ": band_dim " + std::to_string(dim) + " is not a dim of " + shape_text(dims));
  }
  auto& rows = one[static_cast<size_t>(dim)];
  rows = std::min<hsize_t>(rows, static_cast<hsize_t>(options.band_rows()));
  return one;
}

}  // namespace

// ---------------------------------------------------------------------------
// Writing sample by sample
// ---------------------------------------------------------------------------

struct Hdf5SampleWriter::Impl {
  Context ctx;
  std::string dir;
  std::string tmp;
  Handle file;
  struct Dataset {
    Handle id;
    std::vector<hsize_t> dims;
  };
  std::map<std::string, Dataset> datasets;
  bool done = false;      // committed, or failed past repair
  bool released = false;  // the file closed for others (release())
  bool joined = false;    // another writer's released file (join())
  bool replace = false;   // commit() over a file at the path (options.replace())

  // The dims of dataset `name`, for a write before the commit.
  const std::vector<hsize_t>& dims_for_write(const std::string& name) const {
    if (done) ctx.fail("write after commit");
    if (released) ctx.fail("write after release");
    const auto it = datasets.find(name);
    if (it == datasets.end()) ctx.fail("no dataset " + single_quoted(name) + " to write");
    return it->second.dims;
  }
  /// Writes `data` into the hyperslab start/count of dataset `name` (checked).
  void write_block(const std::string& name, const std::vector<hsize_t>& start,
                   const std::vector<hsize_t>& count, const torch::Tensor& data);
  /// Closes every handle and removes the temporary file; under the HDF5 lock.
  /// The file's descriptor is pointed at /dev/null first: after a failed write
  /// (a full disk, EFBIG) HDF5 keeps the dirty chunks and would write them
  /// again at each close and at exit, where a failed close crashes its
  /// cleanup; so the closes write nothing (where one still fails, the
  /// process skips HDF5's cleanup at exit).
  void discard() {
    void* handle = nullptr;
    if (file.valid() && H5Fget_vfd_handle(file.get(), H5P_DEFAULT, &handle) >= 0 && handle) {
      const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
      if (null_fd >= 0) {
        ::dup2(null_fd, *static_cast<int*>(handle));
        ::close(null_fd);
      }
    }
    for (auto& [name, d] : datasets) {
      if (d.id.close() < 0) hdf5_file_left_open();
    }
    datasets.clear();
    if (file.close() < 0) hdf5_file_left_open();
    if (!tmp.empty()) ::unlink(tmp.c_str());
    tmp.clear();
    done = true;
  }
};

Hdf5SampleWriter::Hdf5SampleWriter(
    const std::string& path,
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& datasets,
    const SampleWriterOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.ctx.path = path;
  m.replace = options.replace();
  const Context& ctx = m.ctx;
  std::string base;
  std::tie(m.dir, base) = split_path(ctx, path);
  if (datasets.empty()) ctx.fail("no datasets to write");
  if (options.band_rows() < 0) {
    ctx.fail("band_rows must be >= 0, got " + std::to_string(options.band_rows()));
  }
  for (const auto& [name, shape] : datasets) {
    if (name.empty()) ctx.fail("a dataset has an empty name");
    if (shape.size() < 2) ctx.fail("dataset " + single_quoted(name) + " needs a shape (N, *S)");
    for (int64_t d : shape) {
      if (d < 1) ctx.fail("dataset " + single_quoted(name) + " has an empty dimension");
    }
  }
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  m.tmp = create_temp_file(ctx, m.dir, base);
  try {
    Handle fapl = file_access(ctx);
    m.file = ctx.check(H5Fcreate(m.tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose,
                       "cannot create the HDF5 file");
    Handle lcpl = ctx.check(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "cannot create link properties");
    ctx.check(H5Pset_create_intermediate_group(lcpl.get(), 1),
              "cannot set intermediate group creation");
    for (const auto& [name, shape] : datasets) {
      const std::string what = "dataset " + single_quoted(name);
      std::vector<hsize_t> dims(shape.begin(), shape.end());
      Handle space =
          ctx.check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose,
                    "cannot create the dataspace of " + what);
      Handle dcpl =
          ctx.check(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "cannot create dataset properties");
      const std::vector<hsize_t> chunk = sample_chunk(ctx, dims, options, what);
      ctx.check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()),
                "cannot chunk " + what);
      if (options.compress()) {
        ctx.check(H5Pset_shuffle(dcpl.get()), "cannot set the shuffle filter on " + what);
        ctx.check(H5Pset_deflate(dcpl.get(), 4), "cannot set deflate compression on " + what);
      } else {
        // Never read back: no fill values written ahead of the data.
        ctx.check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER),
                  "cannot set the fill time of " + what);
      }
      ctx.check(H5Pset_obj_track_times(dcpl.get(), 0), "cannot turn off timestamps on " + what);
      Handle ds = ctx.check(H5Dcreate2(m.file.get(), name.c_str(), H5T_IEEE_F32LE, space.get(),
                                       lcpl.get(), dcpl.get(), H5P_DEFAULT),
                            H5Dclose, "cannot create " + what);
      m.datasets[name] = Impl::Dataset{std::move(ds), dims};
    }
  } catch (...) {
    m.discard();
    throw;
  }
}

Hdf5SampleWriter::Hdf5SampleWriter() : impl_(std::make_unique<Impl>()) {}

Hdf5SampleWriter::~Hdf5SampleWriter() {
  if (!impl_ || impl_->done) return;
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  impl_->discard();
}

const std::string& Hdf5SampleWriter::path() const { return impl_->ctx.path; }

void Hdf5SampleWriter::write(const std::string& name, int64_t first, const torch::Tensor& data) {
  Impl& m = *impl_;
  const Context& ctx = m.ctx;
  const std::vector<hsize_t>& dims = m.dims_for_write(name);
  const std::string what = "dataset " + single_quoted(name);
  if (!data.defined() || data.dim() != static_cast<int64_t>(dims.size()) ||
      !data.is_floating_point()) {
    ctx.fail(what + ": expected a float tensor of rank " + std::to_string(dims.size()));
  }
  for (size_t i = 1; i < dims.size(); ++i) {
    if (static_cast<hsize_t>(data.size(static_cast<int64_t>(i))) != dims[i]) {
      ctx.fail(what + ": sample shape does not match " + shape_text(dims));
    }
  }
  const int64_t b = data.size(0);
  if (first < 0 || b < 0 || static_cast<hsize_t>(first + b) > dims[0]) {
    ctx.fail(what + ": samples [" + std::to_string(first) + ", " + std::to_string(first + b) +
             ") outside " + shape_text(dims));
  }
  if (b == 0) return;
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = static_cast<hsize_t>(first);
  count[0] = static_cast<hsize_t>(b);
  m.write_block(name, start, count, data);
}

void Hdf5SampleWriter::write_rows(const std::string& name, int64_t first, int64_t dim, int64_t row0,
                                  const torch::Tensor& data) {
  Impl& m = *impl_;
  const Context& ctx = m.ctx;
  const std::vector<hsize_t>& dims = m.dims_for_write(name);
  const std::string what = "dataset " + single_quoted(name);
  const auto rank = static_cast<int64_t>(dims.size());
  if (dim < 1 || dim >= rank) {
    ctx.fail(what + ": rows of dim " + std::to_string(dim) + " of " + shape_text(dims));
  }
  if (!data.defined() || data.dim() != rank || !data.is_floating_point()) {
    ctx.fail(what + ": expected a float tensor of rank " + std::to_string(rank));
  }
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = static_cast<hsize_t>(first);
  start[static_cast<size_t>(dim)] = static_cast<hsize_t>(row0);
  for (int64_t i = 0; i < rank; ++i) {
    const auto d = static_cast<size_t>(i);
    const auto size = data.size(i);
    if (i == 0 || i == dim) {
      if (static_cast<int64_t>(start[d]) < 0 || first < 0 || row0 < 0 ||
          start[d] + static_cast<hsize_t>(size) > dims[d]) {
        ctx.fail(what + ": " + (i == 0 ? "samples" : "rows") + " [" + std::to_string(start[d]) +
                 ", " + std::to_string(start[d] + static_cast<hsize_t>(size)) + ") outside " +
                 shape_text(dims));
      }
      count[d] = static_cast<hsize_t>(size);
    } else if (static_cast<hsize_t>(size) != dims[d]) {
      ctx.fail(what + ": band shape does not match " + shape_text(dims));
    }
  }
  if (data.numel() == 0) return;
  m.write_block(name, start, count, data);
}

void Hdf5SampleWriter::Impl::write_block(const std::string& name, const std::vector<hsize_t>& start,
                                         const std::vector<hsize_t>& count,
                                         const torch::Tensor& data) {
  Impl& m = *this;
  const std::string what = "dataset " + single_quoted(name);
  const torch::Tensor host = data.detach().to(torch::kCPU, torch::kFloat).contiguous();
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  const hid_t ds = m.datasets.at(name).id.get();
  Handle file_space =
      ctx.check(H5Dget_space(ds), H5Sclose, "cannot read the shape of " + single_quoted(name));
  ctx.check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                count.data(), nullptr),
            "cannot select samples of " + what);
  Handle mem_space =
      ctx.check(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose,
                "cannot create a dataspace");
  ctx.check(H5Dwrite(ds, H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), H5P_DEFAULT,
                     host.data_ptr()),
            "cannot write " + what);
}

std::string Hdf5SampleWriter::release() {
  Impl& m = *impl_;
  const Context& ctx = m.ctx;
  if (m.done) ctx.fail("release after commit");
  if (m.released) ctx.fail("release after release");
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  try {
    ctx.check(H5Fflush(m.file.get(), H5F_SCOPE_GLOBAL), "cannot write the file");
    for (auto& [name, d] : m.datasets) {
      if (d.id.close() < 0) ctx.fail_h5("cannot close dataset " + single_quoted(name));
    }
    if (m.file.close() < 0) ctx.fail_h5("cannot close the file");
  } catch (...) {
    m.discard();
    throw;
  }
  m.released = true;
  return m.joined ? ctx.path : m.tmp;
}

std::unique_ptr<Hdf5SampleWriter> Hdf5SampleWriter::join(const std::string& temp_path,
                                                         const std::vector<std::string>& names) {
  std::unique_ptr<Hdf5SampleWriter> w(new Hdf5SampleWriter());
  Impl& m = *w->impl_;
  m.ctx.path = temp_path;
  m.joined = true;
  const Context& ctx = m.ctx;
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  try {
    Handle fapl = file_access(ctx);
    m.file = ctx.check(H5Fopen(temp_path.c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose,
                       "cannot open the HDF5 file for writing");
    for (const auto& name : names) {
      const std::string what = "dataset " + single_quoted(name);
      Handle ds = ctx.check(H5Dopen2(m.file.get(), name.c_str(), H5P_DEFAULT), H5Dclose,
                            "cannot open " + what);
      Handle space =
          ctx.check(H5Dget_space(ds.get()), H5Sclose, "cannot read the shape of " + what);
      const int rank = H5Sget_simple_extent_ndims(space.get());
      if (rank < 1) ctx.fail("cannot read the shape of " + what);
      std::vector<hsize_t> dims(static_cast<size_t>(rank));
      ctx.check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr),
                "cannot read the shape of " + what);
      m.datasets[name] = Impl::Dataset{std::move(ds), dims};
    }
  } catch (...) {
    m.discard();
    throw;
  }
  return w;
}

void Hdf5SampleWriter::commit(const std::vector<Attribute>& attributes) {
  Impl& m = *impl_;
  const Context& ctx = m.ctx;
  if (m.done) ctx.fail("commit after commit");
  if (m.joined) ctx.fail("a joined writer releases the file; its maker commits it");
  for (const auto& a : attributes) {
    if (a.name.empty()) ctx.fail("an attribute has an empty name");
    if (!a.is_number && a.text.find('\0') != std::string::npos) {
      ctx.fail("attribute " + single_quoted(a.name) + " contains a NUL character");
    }
  }
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  try {
    if (m.released) {  // (its datasets written by others meanwhile)
      m.datasets.clear();
      Handle fapl = file_access(ctx);
      m.file = ctx.check(H5Fopen(m.tmp.c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose,
                         "cannot open the HDF5 file again");
      m.released = false;
    }
    // The chunks to the file while the datasets are open: a write that fails
    // here (a full disk, EFBIG) leaves them whole, for discard() to close.
    ctx.check(H5Fflush(m.file.get(), H5F_SCOPE_GLOBAL), "cannot write the file");
    for (auto& [name, d] : m.datasets) {
      if (d.id.close() < 0) ctx.fail_h5("cannot close dataset " + single_quoted(name));
    }
    m.datasets.clear();
    for (const auto& a : attributes) write_attribute(ctx, m.file.get(), a);
    ctx.check(H5Fflush(m.file.get(), H5F_SCOPE_GLOBAL), "cannot flush the file");
    if (m.file.close() < 0) ctx.fail_h5("cannot close the file");
    fsync_and_rename(ctx, m.tmp, ctx.path, m.replace);
  } catch (...) {
    m.discard();
    throw;
  }
  m.tmp.clear();
  m.done = true;
  fsync_dir(m.dir);
}

}  // namespace fno::data
