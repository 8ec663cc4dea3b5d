// Internal to data/: the HDF5 plumbing that the loaders (hdf5.cpp), the
// sample and band writer (hdf5_writer.cpp) and the hyperslab reader
// (hdf5_slab.cpp) share: RAII handles, one-line errors naming the file, the
// process-wide lock (the Debian HDF5 is not thread-safe), and the opening of a
// dataset in the loaders' layouts.
#pragma once

#include <fno_data/darcy.h>

#include <hdf5.h>

#include <torch/types.h>

#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fno::data::h5 {

/// The Debian HDF5 is built without thread safety: serialize our use of it.
std::mutex& hdf5_mutex();
/// Says that a file's close failed (after a failed write: a full disk, EFBIG):
/// HDF5 keeps it open, and its own cleanup at exit would crash on it, so the
/// process then skips that cleanup (H5close) at exit.
void hdf5_file_left_open();
/// One line with no control characters.
std::string one_line(std::string s);
/// The description of the innermost error on HDF5's error stack, or "".
std::string hdf5_error_detail();
std::string single_quoted(const std::string& s);
/// "(2, 3)", "(4,)"
std::string shape_text(const std::vector<hsize_t>& dims);

/// Turns off HDF5's printing of its error stack to stderr, for the whole
/// process and for good: our messages carry the detail instead. It is not
/// restored afterwards because HDF5 1.10 leaks internal state when opening
/// some corrupt files fails, and at exit prints "HDF5: infinite loop closing
/// library" (and a line of codes) whenever error printing is on.
class QuietErrors {
 public:
  QuietErrors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;
};

/// Owns one HDF5 identifier and closes it with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { close(); }
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) {
    other.id_ = H5I_INVALID_HID;
  }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      close();
      id_ = other.id_;
      closer_ = other.closer_;
      other.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  /// Closes now; returns the close function's status (0 when nothing was open).
  herr_t close() {
    herr_t status = 0;
    if (id_ >= 0 && closer_ != nullptr) status = closer_(id_);
    id_ = H5I_INVALID_HID;
    return status;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

/// Errors of one file: every message is one line that starts with the path.
struct Context {
  std::string path;

  [[noreturn]] void fail(const std::string& message) const {
    throw std::runtime_error(path + ": " + one_line(message));
  }
  /// fail() with the innermost HDF5 error appended: "MESSAGE: DETAIL".
  [[noreturn]] void fail_h5(const std::string& message) const {
    const std::string detail = hdf5_error_detail();
    fail(detail.empty() ? message : message + ": " + detail);
  }
  Handle check(hid_t id, Handle::Closer closer, const std::string& what) const {
    if (id < 0) fail_h5(what);
    return Handle(id, closer);
  }
  void check(herr_t status, const std::string& what) const {
    if (status < 0) fail_h5(what);
  }
  /// The path names a regular file that is not empty, else fail(): "no such
  /// file" (or the system's reason), "is a directory", "not a regular file" or
  /// "empty file" (hdf5.cpp).
  void require_file() const;
};

/// A numeric dataset of rank 3 or 4 (a 2D or 3D grid), one more with a
/// channel layout, opened and checked.
struct Source {
  std::string key;
  Handle dataset;
  Handle file_type;
  bool is_enum = false;
  Layout layout = Layout::kGrid;
  std::vector<hsize_t> dims;   // as stored in the file
  std::vector<hsize_t> shape;  // (N, R1, R2[, R3]): dims, reversed for MATLAB files
  /// The channel dim in shape (-1: none, kGrid).
  int channel_dim() const {
    if (layout == Layout::kGrid) return -1;
    return layout == Layout::kChannelsFirst ? 1 : static_cast<int>(shape.size()) - 1;
  }
  /// shape without the channel dim: (N, *S).
  std::vector<hsize_t> grid() const {
    std::vector<hsize_t> g = shape;
    if (channel_dim() >= 0) g.erase(g.begin() + channel_dim());
    return g;
  }
};

/// File access properties: HDF5's file locking, where the file system has it.
Handle file_access(const Context& ctx);
/// `path` opened for reading, or a one-line failure naming it; the caller
/// holds a QuietErrors and hdf5_mutex().
Handle open_read_only(const Context& ctx, const std::string& path);
/// Whether `path` (open as `file`) is a MATLAB v7.3 file (stored column-major).
bool is_matlab_file(const Context& ctx, hid_t file, const std::string& path);
/// The dataset `key` of `file`, checked: numeric, rank 3 or 4 (one more with a
/// channel layout; any rank >= 1 without `check_rank`); a missing one names
/// `key_setting` when given.
Source open_source(const Context& ctx, hid_t file, std::string key, bool matlab, Layout layout,
                   const std::string& key_setting, bool check_rank = true);
/// Reads the hyperslab start/stride/count (in `src.shape`'s order: (N, ...)
/// as the loaders see it, a MATLAB file's reversal undone) as float32, in
/// that order, contiguous.
torch::Tensor read_hyperslab(const Context& ctx, const Source& src, std::vector<hsize_t> start,
                             std::vector<hsize_t> stride, std::vector<hsize_t> count, bool matlab);
/// Runs `read` in a forked child first: a crash inside libhdf5 becomes a
/// one-line error naming the file (see hdf5.cpp).
void probe_in_child(const Context& ctx, const std::function<void()>& read);

/// Chunks of at most ~1 MiB: whole samples along dim 0, a larger sample split
/// by halving its largest dims.
std::vector<hsize_t> chunk_shape(const std::vector<hsize_t>& dims, size_t element_size);
void write_attribute(const Context& ctx, hid_t file, const Attribute& a);
/// The directory and file name of `path`; fails when it names no file.
std::pair<std::string, std::string> split_path(const Context& ctx, const std::string& path);
/// An empty temporary file ".BASE.tmp.XXXXXX" in `dir` (mode 0666 less the umask).
std::string create_temp_file(const Context& ctx, const std::string& dir, const std::string& base);
/// fsyncs `tmp` and renames it to `path`; unless `replace`, never over a file there.
void fsync_and_rename(const Context& ctx, const std::string& tmp, const std::string& path,
                      bool replace = true);
/// Makes a rename in `dir` durable.
void fsync_dir(const std::string& dir);

}  // namespace fno::data::h5
