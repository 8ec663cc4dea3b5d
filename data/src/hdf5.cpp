// HDF5 data files (.h5, MATLAB v7.3 .mat) through the HDF5 C API: reading
// (N, R1, R2) and (N, R1, R2, R3) arrays of any numeric type as float32, with strided hyperslab
// subsampling, and writing tensors atomically (temporary file, fsync, rename),
// whole (write_hdf5) or a few samples at a time (Hdf5SampleWriter).
//
// Every HDF5 handle lives in an RAII Handle; HDF5's automatic error printing is
// off while we call it, and its error stack supplies the detail of our
// one-line messages instead.
#include <fno_data/darcy.h>

#include "hdf5_internal.h"

#include <hdf5.h>

#include <ATen/Parallel.h>
#include <torch/types.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace fno::data {
using namespace h5;
namespace h5 {

// ---------------------------------------------------------------------------
// HDF5 plumbing
// ---------------------------------------------------------------------------

/// The Debian HDF5 is built without thread safety: serialize our use of it.
std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

namespace {

// HDF5's cleanup at exit closes the files still open, and crashes on one whose
// close failed: its own atexit handler is replaced by one that skips the
// cleanup once hdf5_file_left_open() was said (before the library starts).
std::atomic<bool> g_file_left_open{false};
[[maybe_unused]] const bool kExitCleanup = [] {
  if (H5dont_atexit() >= 0) {
    std::atexit([] {
      if (!g_file_left_open.load()) H5close();
    });
  }
  return true;
}();

}  // namespace

void hdf5_file_left_open() { g_file_left_open.store(true); }

/// One line with no control characters.
std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

herr_t innermost_error(unsigned n, const H5E_error2_t* err, void* out) {
  auto* text = static_cast<std::string*>(out);
  if (n == 0 && err != nullptr) {
    if (err->desc != nullptr && err->desc[0] != '\0') {
      *text = err->desc;
    } else {
      char msg[256] = {0};
      if (H5Eget_msg(err->min_num, nullptr, msg, sizeof msg) > 0) *text = msg;
    }
  }
  return 0;
}

/// The description of the innermost error on HDF5's error stack (where the
/// failure was detected), or "" when the stack is empty.
std::string hdf5_error_detail() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &text);
  H5Eclear2(H5E_DEFAULT);
  // The file driver's "file write failed: time = ..., filename = ..., errno =
  // 27, error message = 'File too large', buf = ..." -> "file write failed:
  // File too large".
  const std::string key = "error message = '";
  const auto at = text.find(key), colon = text.find(": time = ");
  const auto end = at == std::string::npos ? at : text.find('\'', at + key.size());
  if (end != std::string::npos && colon != std::string::npos && colon < at) {
    text = text.substr(0, colon) + ": " + text.substr(at + key.size(), end - at - key.size());
  }
  return one_line(text);
}

std::string single_quoted(const std::string& s) { return "'" + s + "'"; }

std::string shape_text(const std::vector<hsize_t>& dims) {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? ", " : "") << dims[i];
  if (dims.size() == 1) out << ",";
  out << ")";
  return out.str();
}

const char* class_name(H5T_class_t cls) {
  switch (cls) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    default: return "unknown type";
  }
}

htri_t is_hdf5_file(const std::string& path) {
#if H5_VERSION_GE(1, 12, 0)
  return H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  return H5Fis_hdf5(path.c_str());
#endif
}

/// File access properties: keep HDF5's file locking, but do not fail on file
/// systems that lack it.
Handle file_access(const Context& ctx) {
  Handle fapl = ctx.check(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot create file access properties");
#if H5_VERSION_GE(1, 10, 7)
  ctx.check(H5Pset_file_locking(fapl.get(), /*use_file_locking=*/true, /*ignore_when_disabled=*/true),
            "cannot set file locking");
#endif
  return fapl;
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

/// Names in a group, for "found: ..." in error messages.
herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  auto* names = static_cast<std::vector<std::string>*>(out);
  names->emplace_back(name);
  return names->size() >= 21 ? 1 : 0;  // 20 shown, then "..."
}

std::string list_names(hid_t file, const std::string& group) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Literate_by_name(file, group.c_str(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &names,
                     H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  if (names.empty()) return "nothing";
  std::string text;
  for (size_t i = 0; i < names.size() && i < 20; ++i) text += (i ? ", " : "") + one_line(names[i]);
  if (names.size() > 20) text += ", ...";
  return text;
}

/// Whether every link on the path `key` ("a/b/c") exists: H5Lexists only looks
/// at the last component.
bool path_exists(hid_t file, const std::string& key, std::string* deepest_group) {
  *deepest_group = "/";
  size_t pos = 0;
  while (true) {
    const size_t slash = key.find('/', pos);
    const std::string prefix = key.substr(0, slash);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (slash == std::string::npos) return true;
    *deepest_group = prefix;
    pos = slash + 1;
  }
}

Source open_source(const Context& ctx, hid_t file, std::string key, bool matlab, Layout layout,
                   const std::string& key_setting, bool check_rank) {
  while (!key.empty() && key.front() == '/') key.erase(0, 1);
  Source src;
  src.key = key;
  std::string group;
  if (key.empty() || !path_exists(file, key, &group)) {
    ctx.fail("no dataset " + single_quoted(key) + " (found" +
             (group == "/" ? "" : " in " + single_quoted(group)) + ": " + list_names(file, group) +
             ")" + (key_setting.empty() ? "" : "; set " + key_setting + " to its name"));
  }
  Handle object = ctx.check(H5Oopen(file, key.c_str(), H5P_DEFAULT), H5Oclose, "cannot open " + single_quoted(key));
  const H5I_type_t kind = H5Iget_type(object.get());
  if (kind != H5I_DATASET) {
    ctx.fail(single_quoted(key) + " is " + (kind == H5I_GROUP ? "a group" : "a named datatype") + ", not a dataset");
  }
  src.dataset = std::move(object);
  const hid_t ds = src.dataset.get();

  src.file_type = ctx.check(H5Dget_type(ds), H5Tclose, "cannot read the type of " + single_quoted(key));
  const H5T_class_t cls = H5Tget_class(src.file_type.get());
  bool numeric = cls == H5T_INTEGER || cls == H5T_FLOAT;
  if (cls == H5T_ENUM) {
    // h5py stores numpy bool as an enum {FALSE = 0, TRUE = 1} over int8.
    Handle base(H5Tget_super(src.file_type.get()), H5Tclose);
    numeric = base.valid() && H5Tget_class(base.get()) == H5T_INTEGER;
    src.is_enum = true;
  }
  if (!numeric) ctx.fail("dataset " + single_quoted(key) + " is not numeric (" + class_name(cls) + ")");

  Handle space = ctx.check(H5Dget_space(ds), H5Sclose, "cannot read the shape of " + single_quoted(key));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) ctx.fail_h5("cannot read the shape of " + single_quoted(key));
  const int extra = layout == Layout::kGrid ? 0 : 1;  // a channel dim
  if (!check_rank && rank < 1) {
    ctx.fail("dataset " + single_quoted(key) + " is a scalar, expected an array");
  }
  if (check_rank && rank != 3 + extra && rank != 4 + extra) {
    ctx.fail("dataset " + single_quoted(key) + " has rank " + std::to_string(rank) + ", expected " +
             layout_ranks(layout) +
             (!matlab ? ""
              : layout == Layout::kGrid
                  ? " (MATLAB stores them reversed: (R2, R1, N) or (R3, R2, R1, N))"
                  : " (MATLAB stores them reversed)") +
             (layout == Layout::kGrid && rank == 5
                  ? " (C channels per sample: a channel layout, data.x_layout/y_layout)"
                  : ""));
  }
  src.layout = layout;
  src.dims.assign(static_cast<size_t>(rank), 0);
  ctx.check(H5Sget_simple_extent_dims(space.get(), src.dims.data(), nullptr), "cannot read the shape of " + single_quoted(key));
  src.shape = src.dims;
  if (matlab) std::reverse(src.shape.begin(), src.shape.end());
  return src;
}

/// The torch dtype holding one value of an integer HDF5 type.
torch::ScalarType integer_dtype(const Context& ctx, hid_t int_type, const std::string& key) {
  const size_t size = H5Tget_size(int_type);
  const bool is_signed = H5Tget_sign(int_type) == H5T_SGN_2;
  switch (size) {
    case 1: return is_signed ? torch::kChar : torch::kByte;
    case 2: return is_signed ? torch::kShort : torch::kUInt16;
    case 4: return is_signed ? torch::kInt : torch::kUInt32;
    case 8: return is_signed ? torch::kLong : torch::kUInt64;
    default: ctx.fail("dataset " + single_quoted(key) + " is an enum over a " + std::to_string(size) + "-byte integer");
  }
}

torch::Tensor allocate(const Context& ctx, const std::vector<hsize_t>& count, torch::ScalarType dtype,
                       const std::string& key) {
  std::vector<int64_t> sizes(count.begin(), count.end());
  try {
    return torch::empty(sizes, torch::TensorOptions().dtype(dtype));
  } catch (const std::exception&) {
    double bytes = static_cast<double>(c10::elementSize(dtype));
    for (hsize_t c : count) bytes *= static_cast<double>(c);
    std::ostringstream out;
    out.precision(3);
    out << "cannot allocate " << bytes / (1 << 30) << " GiB to read " << single_quoted(key) << " "
        << shape_text(count);
    ctx.fail(out.str());
  }
}

/// Reads samples [0, n) with every k-th point along each spatial dim (a
/// channel dim whole), as float32 (N', R1', R2'[, R3']) in sample-major order
/// (with a channel dim where the layout has it).
torch::Tensor read_source(const Context& ctx, const Source& src, hsize_t n, hsize_t k, bool matlab) {
  const auto kept = [k](hsize_t r) { return (r + k - 1) / k; };
  // In the loaders' order (N, ...).
  const size_t rank = src.shape.size();
  std::vector<hsize_t> start(rank, 0);
  std::vector<hsize_t> stride(rank, k);
  std::vector<hsize_t> count(rank);
  for (size_t d = 0; d < rank; ++d) count[d] = kept(src.shape[d]);
  stride[0] = 1;
  count[0] = n;
  if (src.channel_dim() >= 0) {
    const auto c = static_cast<size_t>(src.channel_dim());
    stride[c] = 1;
    count[c] = src.shape[c];
  }
  return read_hyperslab(ctx, src, std::move(start), std::move(stride), std::move(count), matlab);
}

torch::Tensor read_hyperslab(const Context& ctx, const Source& src, std::vector<hsize_t> start,
                             std::vector<hsize_t> stride, std::vector<hsize_t> count, bool matlab) {
  // File order: (N, R1, R2[, R3]), or reversed, ([R3, ]R2, R1, N), for MATLAB.
  const size_t rank = src.dims.size();
  if (matlab) {
    std::reverse(start.begin(), start.end());
    std::reverse(stride.begin(), stride.end());
    std::reverse(count.begin(), count.end());
  }
  const std::string& key = src.key;
  const hid_t ds = src.dataset.get();
  Handle file_space = ctx.check(H5Dget_space(ds), H5Sclose, "cannot read the shape of " + single_quoted(key));
  ctx.check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), stride.data(), count.data(),
                                nullptr),
            "cannot select the samples of " + single_quoted(key));
  Handle mem_space = ctx.check(H5Screate_simple(static_cast<int>(rank), count.data(), nullptr),
                               H5Sclose, "cannot create a dataspace");

  torch::Tensor out;
  if (!src.is_enum) {
    // HDF5 converts any integer or float type to float32 itself.
    out = allocate(ctx, count, torch::kFloat, key);
    ctx.check(H5Dread(ds, H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), H5P_DEFAULT, out.data_ptr()),
              "cannot read dataset " + single_quoted(key));
  } else {
    // HDF5 converts enums only to enums: read the native form of the file's
    // enum (same members, native base integer), then convert the integers.
    Handle mem_type = ctx.check(H5Tget_native_type(src.file_type.get(), H5T_DIR_ASCEND), H5Tclose,
                                "cannot map the enum type of " + single_quoted(key));
    Handle base = ctx.check(H5Tget_super(mem_type.get()), H5Tclose, "cannot read the enum base of " + single_quoted(key));
    out = allocate(ctx, count, integer_dtype(ctx, base.get(), key), key);
    ctx.check(H5Dread(ds, mem_type.get(), mem_space.get(), file_space.get(), H5P_DEFAULT, out.data_ptr()),
              "cannot read dataset " + single_quoted(key));
    out = out.to(torch::kFloat);
  }
  if (matlab) {
    // Column-major: ([R3, ]R2, R1, N) -> (N, R1, R2[, R3]), every dim reversed.
    std::vector<int64_t> reversed(rank);
    for (size_t d = 0; d < rank; ++d) reversed[d] = static_cast<int64_t>(rank - 1 - d);
    out = out.permute(reversed).contiguous();
  }
  return out;
}

/// "NaN or Inf in 'sol' (3 values, first in sample 2)"; named by the dataset.
void check_finite(const Context& ctx, const torch::Tensor& t, const Source& src) {
  const torch::Tensor bad = ~torch::isfinite(t);
  const int64_t n_bad = bad.sum().item<int64_t>();
  if (n_bad == 0) return;
  const int64_t first = bad.flatten(1).any(1).nonzero()[0].item<int64_t>();
  // HDF5 turns values beyond float32's range into Inf.
  const bool wide = H5Tget_class(src.file_type.get()) == H5T_FLOAT && H5Tget_size(src.file_type.get()) > 4;
  ctx.fail("NaN or Inf in " + single_quoted(src.key) + " (" + std::to_string(n_bad) + " value" +
           (n_bad == 1 ? "" : "s") + ", first in sample " + std::to_string(first) +
           (wide ? "; values beyond the float32 range read as Inf" : "") + ")");
}

constexpr char kMatlabHeader[] = "MATLAB 7.3 MAT-file";

bool is_matlab(const Context& ctx, hid_t file, const char* header, size_t header_size) {
  Handle fcpl = ctx.check(H5Fget_create_plist(file), H5Pclose, "cannot read the file properties");
  hsize_t userblock = 0;
  ctx.check(H5Pget_userblock(fcpl.get(), &userblock), "cannot read the user block size");
  return userblock >= header_size &&
         std::strncmp(header, kMatlabHeader, sizeof kMatlabHeader - 1) == 0;
}

bool is_matlab_file(const Context& ctx, hid_t file, const std::string& path) {
  char header[128] = {0};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ctx.fail(std::strerror(errno));
  ssize_t got = 0;
  while ((got = ::pread(fd, header, sizeof header, 0)) < 0 && errno == EINTR) {
  }
  ::close(fd);
  return got > 0 && is_matlab(ctx, file, header, sizeof header);
}

}  // namespace h5

namespace h5 {

FieldPairs read_hdf5_locked(const Context& ctx, const std::string& path, const LoadOptions& options,
                            const char (&header)[128], bool quiet_warnings);

void Context::require_file() const {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail(errno == ENOENT ? std::string("no such file") : std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("is a directory");
  if (!S_ISREG(st.st_mode)) fail("not a regular file");
  if (st.st_size == 0) fail("empty file");
}

// Runs `read` in a forked child and turns its death by a signal into an error
// naming the file. The child touches only this thread's state: it runs torch
// single-threaded (a forked child must not enter the parent's OpenMP pool),
// keeps quiet on stderr and leaves with _exit. Without fork (ENOMEM, ...) the
// probe is skipped.
constexpr int kProbeRead = 0;    // the child read the file
constexpr int kProbeError = 3;   // the child's read failed with an ordinary error

void probe_in_child(const Context& ctx, const std::function<void()>& read) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return;
  if (pid == 0) {
    // Crash handlers installed by the parent (a test framework's, a fuzzer's,
    // a sanitizer's) must not run here: a crash ends the child by its signal.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, SIG_DFL);
    const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull >= 0) {
      ::dup2(devnull, STDOUT_FILENO);
      ::dup2(devnull, STDERR_FILENO);
    }
    int code = kProbeRead;
    try {
      at::set_num_threads(1);
      read();
    } catch (...) {
      code = kProbeError;  // an ordinary error: the parent's own read reports it
    }
    ::_exit(code);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return;
  }
  if (WIFEXITED(status) &&
      (WEXITSTATUS(status) == kProbeRead || WEXITSTATUS(status) == kProbeError)) {
    return;
  }
  // Anything else (a signal, or an exit of a handler we did not expect) means
  // the read would take this process down too.
  ctx.fail(WIFSIGNALED(status)
               ? std::string("the HDF5 library crashed reading this file (") +
                     ::strsignal(WTERMSIG(status)) + "); the file is damaged or not a valid HDF5 file"
               : "the HDF5 library failed reading this file (exit status " +
                     std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                     "); the file is damaged or not a valid HDF5 file");
}

}  // namespace h5

FieldPairs load_hdf5(const std::string& path, const LoadOptions& options) {
  const Context ctx{path};
  if (options.subsample() < 1) ctx.fail("subsample must be >= 1, got " + std::to_string(options.subsample()));
  if (options.n_samples() == 0 || options.n_samples() < -1) {
    ctx.fail("n_samples must be positive or -1 (all), got " + std::to_string(options.n_samples()));
  }

  // Does the file exist, is it empty; its first bytes tell a MATLAB file.
  ctx.require_file();
  char header[128] = {0};
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) ctx.fail(std::strerror(errno));
    ssize_t got = 0;
    while ((got = ::pread(fd, header, sizeof header, 0)) < 0 && errno == EINTR) {
    }
    const int read_err = errno;
    ::close(fd);
    if (got < 0) ctx.fail(std::string("cannot read: ") + std::strerror(read_err));
  }

  std::lock_guard<std::mutex> lock(hdf5_mutex());
  // libhdf5 itself can crash on damaged files (tests/fuzz/known has one for
  // Debian's 1.10.8). Read the file once in a child process first: a crash
  // there becomes a clear error here. The read is repeated in this process,
  // where it now succeeds or fails with a message, as the child did.
  probe_in_child(ctx, [&] { read_hdf5_locked(ctx, path, options, header, /*quiet=*/true); });
  return read_hdf5_locked(ctx, path, options, header, /*quiet=*/false);
}

namespace h5 {

// `path` opened for reading, or a one-line failure naming it ("not an HDF5
// file", ...); the caller holds a QuietErrors and hdf5_mutex().
Handle open_read_only(const Context& ctx, const std::string& path) {
  const htri_t is_hdf5 = is_hdf5_file(path);
  if (is_hdf5 == 0) ctx.fail("not an HDF5 file");
  if (is_hdf5 < 0) ctx.fail_h5("cannot read the file");
  Handle fapl = file_access(ctx);
  return ctx.check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose,
                   "not a readable HDF5 file");
}

herr_t collect_attribute_name(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// The root attributes of `path` (scalar numbers as double, strings), under hdf5_mutex().
std::vector<Attribute> read_attributes_locked(const Context& ctx, const std::string& path) {
  QuietErrors quiet;
  Handle file = open_read_only(ctx, path);
  std::vector<std::string> names;
  hsize_t index = 0;
  ctx.check(H5Aiterate2(file.get(), H5_INDEX_NAME, H5_ITER_INC, &index, collect_attribute_name,
                        &names),
            "cannot list the attributes");
  std::vector<Attribute> out;
  for (const auto& name : names) {
    const std::string what = "attribute " + single_quoted(name);
    Handle attr = ctx.check(H5Aopen(file.get(), name.c_str(), H5P_DEFAULT), H5Aclose,
                            "cannot open " + what);
    Handle space = ctx.check(H5Aget_space(attr.get()), H5Sclose, "cannot read the shape of " + what);
    if (H5Sget_simple_extent_type(space.get()) != H5S_SCALAR) continue;
    Handle type = ctx.check(H5Aget_type(attr.get()), H5Tclose, "cannot read the type of " + what);
    const H5T_class_t cls = H5Tget_class(type.get());
    Attribute a;
    a.name = name;
    if (cls == H5T_FLOAT || cls == H5T_INTEGER) {
      a.is_number = true;
      ctx.check(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &a.number), "cannot read " + what);
    } else if (cls == H5T_STRING) {
      const htri_t vlen = H5Tis_variable_str(type.get());
      if (vlen < 0) ctx.fail_h5("cannot read the type of " + what);
      Handle mem = ctx.check(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create a string type");
      ctx.check(H5Tset_cset(mem.get(), H5Tget_cset(type.get())), "cannot create a string type");
      if (vlen > 0) {
        ctx.check(H5Tset_size(mem.get(), H5T_VARIABLE), "cannot create a string type");
        char* text = nullptr;
        ctx.check(H5Aread(attr.get(), mem.get(), &text), "cannot read " + what);
        if (text != nullptr) {
          a.text = text;
          H5free_memory(text);
        }
      } else {
        const size_t size = H5Tget_size(type.get());
        std::string buf(size + 1, '\0');
        ctx.check(H5Tset_size(mem.get(), size + 1), "cannot create a string type");
        ctx.check(H5Aread(attr.get(), mem.get(), buf.data()), "cannot read " + what);
        a.text = buf.c_str();
      }
    } else {
      continue;
    }
    out.push_back(std::move(a));
  }
  if (file.close() < 0) ctx.fail_h5("cannot close the file");
  return out;
}

}  // namespace h5

std::vector<Attribute> read_hdf5_attributes(const std::string& path) {
  const Context ctx{path};
  ctx.require_file();
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  probe_in_child(ctx, [&] { read_attributes_locked(ctx, path); });
  return read_attributes_locked(ctx, path);
}

namespace h5 {

// The HDF5 part of load_hdf5, under hdf5_mutex(). `quiet`: no warnings on stderr.
FieldPairs read_hdf5_locked(const Context& ctx, const std::string& path, const LoadOptions& options,
                            const char (&header)[128], bool quiet_warnings) {
  const std::string x_key = options.x_key().empty() ? "coeff" : options.x_key();
  const std::string y_key = options.y_key().empty() ? "sol" : options.y_key();
  QuietErrors quiet;
  Handle file = open_read_only(ctx, path);

  // MATLAB v7.3: a 512-byte user block that starts with the MAT-file header.
  const bool matlab = is_matlab(ctx, file.get(), header, sizeof header);

  Source xs =
      open_source(ctx, file.get(), x_key, matlab, options.x_layout(), options.x_key_setting());
  Source ys =
      open_source(ctx, file.get(), y_key, matlab, options.y_layout(), options.y_key_setting());
  if (xs.grid() != ys.grid()) {
    // An array of rank 4 read as a grid may be channels of a 2D grid.
    const bool channels = (options.x_layout() == Layout::kGrid && xs.shape.size() == 4) ||
                          (options.y_layout() == Layout::kGrid && ys.shape.size() == 4);
    ctx.fail(
        "dataset " + single_quoted(x_key) + " has shape " + shape_text(xs.shape) + " but " +
        single_quoted(y_key) + " has " + shape_text(ys.shape) + (matlab ? " (MATLAB order)" : "") +
        (channels ? "; if one holds channels, (N, C, R1, R2) or (N, R1, R2, C), set its layout "
                    "(data.x_layout/y_layout)"
                  : ""));
  }
  const hsize_t n_file = xs.shape[0];
  if (n_file == 0) ctx.fail("holds 0 samples");
  if (std::find(xs.shape.begin() + 1, xs.shape.end(), hsize_t{0}) != xs.shape.end()) {
    ctx.fail("dataset " + single_quoted(x_key) + " has an empty grid " + shape_text(xs.shape));
  }
  hsize_t n = n_file;
  if (options.n_samples() > 0) {
    const auto asked = static_cast<hsize_t>(options.n_samples());
    if (asked > n_file) {
      if (!quiet_warnings) {
        std::cerr << path << ": asked for " << asked << " samples, file holds " << n_file << "; using "
                  << n_file << std::endl;
      }
    } else {
      n = asked;
    }
  }
  const auto k = static_cast<hsize_t>(options.subsample());

  FieldPairs pairs;
  pairs.x = read_source(ctx, xs, n, k, matlab);
  check_finite(ctx, pairs.x, xs);
  if (y_key == x_key && options.y_layout() == options.x_layout()) {
    pairs.y = pairs.x;  // one array as both (e.g. Navier-Stokes records): read once
  } else {
    pairs.y = read_source(ctx, ys, n, k, matlab);
    check_finite(ctx, pairs.y, ys);
  }
  // [N, C, R1, R2[, R3]] (C = 1 for kGrid)
  pairs.x = to_channels(pairs.x, options.x_layout()).contiguous();
  pairs.y = to_channels(pairs.y, options.y_layout()).contiguous();

  // Close everything before validate(), which may throw.
  ys = Source();
  xs = Source();
  if (file.close() < 0) ctx.fail_h5("cannot close the file");
  validate(pairs, path);
  return pairs;
}

}  // namespace h5

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------
namespace h5 {

struct PreparedDataset {
  std::string name;
  torch::Tensor data;  // CPU, contiguous; bool stored as uint8
  hid_t mem_type;
  hid_t file_type;
};

std::vector<PreparedDataset> prepare(const Context& ctx,
                                     const std::vector<std::pair<std::string, torch::Tensor>>& datasets) {
  std::vector<PreparedDataset> out;
  for (const auto& [name, tensor] : datasets) {
    if (name.empty()) ctx.fail("a dataset has an empty name");
    if (!tensor.defined()) ctx.fail("dataset " + single_quoted(name) + " is an undefined tensor");
    if (tensor.dim() < 1) ctx.fail("dataset " + single_quoted(name) + " has rank 0, expected >= 1");
    PreparedDataset p{name, tensor.detach().to(torch::kCPU), -1, -1};
    switch (p.data.scalar_type()) {
      case torch::kFloat: p.mem_type = H5T_NATIVE_FLOAT; p.file_type = H5T_IEEE_F32LE; break;
      case torch::kDouble: p.mem_type = H5T_NATIVE_DOUBLE; p.file_type = H5T_IEEE_F64LE; break;
      case torch::kInt: p.mem_type = H5T_NATIVE_INT32; p.file_type = H5T_STD_I32LE; break;
      case torch::kLong: p.mem_type = H5T_NATIVE_INT64; p.file_type = H5T_STD_I64LE; break;
      case torch::kByte: p.mem_type = H5T_NATIVE_UINT8; p.file_type = H5T_STD_U8LE; break;
      case torch::kBool:
        p.data = p.data.to(torch::kByte);
        p.mem_type = H5T_NATIVE_UINT8;
        p.file_type = H5T_STD_U8LE;
        break;
      default:
        ctx.fail("dataset " + single_quoted(name) + " has dtype " + c10::toString(p.data.scalar_type()) +
                 "; supported: float32, float64, int32, int64, uint8, bool");
    }
    p.data = p.data.contiguous();
    out.push_back(std::move(p));
  }
  return out;
}

/// Chunks of at most ~1 MiB: whole samples (as many as fit) along dim 0; a
/// sample larger than that is split by halving its largest dims.
std::vector<hsize_t> chunk_shape(const std::vector<hsize_t>& dims, size_t element_size) {
  constexpr hsize_t kTarget = hsize_t{1} << 20;
  std::vector<hsize_t> chunk = dims;
  hsize_t sample_bytes = element_size;
  for (size_t i = 1; i < dims.size(); ++i) sample_bytes *= dims[i];
  chunk[0] = std::clamp<hsize_t>(kTarget / sample_bytes, 1, dims[0]);
  const auto bytes = [&] {
    hsize_t b = element_size;
    for (hsize_t c : chunk) b *= c;
    return b;
  };
  while (bytes() > kTarget) {
    auto largest = std::max_element(chunk.begin() + 1, chunk.end());
    if (largest == chunk.end() || *largest <= 1) break;
    *largest = (*largest + 1) / 2;
  }
  return chunk;
}

void write_dataset(const Context& ctx, hid_t file, hid_t lcpl, const PreparedDataset& p) {
  const std::string what = "dataset " + single_quoted(p.name);
  std::vector<hsize_t> dims(p.data.sizes().begin(), p.data.sizes().end());
  Handle space = ctx.check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose,
                           "cannot create the dataspace of " + what);
  Handle dcpl = ctx.check(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "cannot create dataset properties");
  const bool empty = p.data.numel() == 0;
  if (!empty) {  // chunks need non-zero extents; an empty dataset stays contiguous
    const std::vector<hsize_t> chunk = chunk_shape(dims, p.data.element_size());
    ctx.check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), "cannot chunk " + what);
    ctx.check(H5Pset_shuffle(dcpl.get()), "cannot set the shuffle filter on " + what);
    ctx.check(H5Pset_deflate(dcpl.get(), 4), "cannot set deflate compression on " + what);
  }
  Handle ds = ctx.check(H5Dcreate2(file, p.name.c_str(), p.file_type, space.get(), lcpl, dcpl.get(), H5P_DEFAULT),
                        H5Dclose, "cannot create " + what);
  if (!empty) {
    ctx.check(H5Dwrite(ds.get(), p.mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data.data_ptr()),
              "cannot write " + what);
  }
  if (ds.close() < 0) ctx.fail_h5("cannot close " + what);
}

void write_attribute(const Context& ctx, hid_t file, const Attribute& a) {
  const std::string what = "attribute " + single_quoted(a.name);
  Handle space = ctx.check(H5Screate(H5S_SCALAR), H5Sclose, "cannot create a scalar dataspace");
  if (a.is_number) {
    Handle attr = ctx.check(H5Acreate2(file, a.name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                            H5Aclose, "cannot create " + what);
    ctx.check(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &a.number), "cannot write " + what);
    if (attr.close() < 0) ctx.fail_h5("cannot close " + what);
    return;
  }
  // A variable-length UTF-8 string, which h5py reads back as str.
  Handle type = ctx.check(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create a string type");
  ctx.check(H5Tset_size(type.get(), H5T_VARIABLE), "cannot create a string type");
  ctx.check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "cannot create a string type");
  Handle attr = ctx.check(H5Acreate2(file, a.name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                          H5Aclose, "cannot create " + what);
  const char* text = a.text.c_str();
  ctx.check(H5Awrite(attr.get(), type.get(), &text), "cannot write " + what);
  if (attr.close() < 0) ctx.fail_h5("cannot close " + what);
}

/// Writes the whole HDF5 file at `file_path`; all handles are closed on return.
void write_contents(const Context& ctx, const std::string& file_path, const std::vector<PreparedDataset>& datasets,
                    const std::vector<Attribute>& attributes) {
  Handle fapl = file_access(ctx);
  Handle file = ctx.check(H5Fcreate(file_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose,
                          "cannot create the HDF5 file");
  Handle lcpl = ctx.check(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "cannot create link properties");
  ctx.check(H5Pset_create_intermediate_group(lcpl.get(), 1), "cannot set intermediate group creation");
  for (const auto& p : datasets) write_dataset(ctx, file.get(), lcpl.get(), p);
  for (const auto& a : attributes) write_attribute(ctx, file.get(), a);
  ctx.check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "cannot flush the file");
  if (file.close() < 0) ctx.fail_h5("cannot close the file");
}

/// The directory and file name of `path`; fails when it names no file.
std::pair<std::string, std::string> split_path(const Context& ctx, const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") ctx.fail("not a file name");
  return {dir, base};
}

/// Creates an empty temporary file ".BASE.tmp.XXXXXX" in `dir`, with mode 0666
/// less the umask, and returns its path.
std::string create_temp_file(const Context& ctx, const std::string& dir, const std::string& base) {
  std::string tmp = dir + "/." + base + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) ctx.fail("cannot create a temporary file in " + dir + ": " + std::strerror(errno));
  const mode_t mask = ::umask(0);  // mkstemp makes 0600; use 0666 less the umask
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  ::close(fd);
  return tmp;
}

/// fsyncs the finished temporary file and renames it to `path` (throws on
/// failure; the caller removes the temporary file). Unless `replace`, a file
/// at `path` is never written over, even one that appeared meanwhile: the
/// temporary file is linked to `path` (which fails if it exists), then
/// unlinked; a file system without hard links gets a checked rename.
void fsync_and_rename(const Context& ctx, const std::string& tmp, const std::string& path,
                      bool replace) {
  const int tfd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (tfd < 0) ctx.fail(std::string("cannot reopen the temporary file: ") + std::strerror(errno));
  if (::fsync(tfd) != 0) {
    const int err = errno;
    ::close(tfd);
    ctx.fail(std::string("fsync failed: ") + std::strerror(err));
  }
  ::close(tfd);
  if (!replace) {
    if (::link(tmp.c_str(), path.c_str()) == 0) {
      ::unlink(tmp.c_str());
      return;
    }
    struct stat st {};
    if (errno == EEXIST || ::lstat(path.c_str(), &st) == 0) {
      ctx.fail("exists (it appeared while the file was written); nothing is written over it");
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    ctx.fail(std::string("rename failed: ") + std::strerror(errno));
}

/// Makes a rename in `dir` durable.
void fsync_dir(const std::string& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace h5

void write_hdf5(const std::string& path,
                const std::vector<std::pair<std::string, torch::Tensor>>& datasets,
                const std::vector<Attribute>& attributes) {
  const Context ctx{path};
  const auto [dir, base] = split_path(ctx, path);
  for (const auto& a : attributes) {
    if (a.name.empty()) ctx.fail("an attribute has an empty name");
    if (!a.is_number && a.text.find('\0') != std::string::npos) {
      ctx.fail("attribute " + single_quoted(a.name) + " contains a NUL character");
    }
  }
  // The H5T_NATIVE_* ids that prepare() takes initialize the library: lock first.
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  const std::vector<PreparedDataset> prepared = prepare(ctx, datasets);

  const std::string tmp = create_temp_file(ctx, dir, base);
  try {
    write_contents(ctx, tmp, prepared, attributes);
    fsync_and_rename(ctx, tmp, path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_dir(dir);
}

}  // namespace fno::data
