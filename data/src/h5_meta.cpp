// MetaFile: objects, shapes and attributes of an HDF5 file (h5_meta.h).
#include "h5_meta.h"

#include <hdf5.h>

#include <algorithm>
#include <cstring>

#include "hdf5_internal.h"

namespace fno::data::h5 {

struct MetaFile::Impl {
  Context ctx;
  Handle file;
};

namespace {

herr_t collect(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}

std::string object_name(const std::string& object) {
  return object.empty() || object == "/" ? std::string("the root") : single_quoted(object);
}

// An enum's native integers (h5py's bool over int8), widened to doubles.
std::vector<double> widen_enum(const std::vector<unsigned char>& raw, size_t size, hssize_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  for (hssize_t i = 0; i < n; ++i) {
    int64_t v = 0;
    const unsigned char* b = raw.data() + static_cast<size_t>(i) * size;
    if (size == 1) {
      v = static_cast<int8_t>(b[0]);
    } else if (size == 2) {
      int16_t x;
      std::memcpy(&x, b, 2);
      v = x;
    } else if (size == 4) {
      int32_t x;
      std::memcpy(&x, b, 4);
      v = x;
    } else {
      std::memcpy(&v, b, 8);
    }
    out[static_cast<size_t>(i)] = static_cast<double>(v);
  }
  return out;
}

}  // namespace

MetaFile::MetaFile(const std::string& path) : p_(std::make_unique<Impl>()) {
  p_->ctx.path = path;
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  p_->file = open_read_only(p_->ctx, path);
}

MetaFile::~MetaFile() {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  p_->file.close();
}

const std::string& MetaFile::path() const { return p_->ctx.path; }
void MetaFile::fail(const std::string& message) const { p_->ctx.fail(message); }

bool MetaFile::is_group(const std::string& name) const {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  if (name.empty() || name == "/") return true;
  H5O_info_t info{};
  // Each link on the path must exist (H5Oget_info_by_name fails otherwise).
  if (H5Oget_info_by_name(p_->file.get(), name.c_str(), &info, H5P_DEFAULT) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  return info.type == H5O_TYPE_GROUP;
}

bool MetaFile::is_dataset(const std::string& name) const {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  H5O_info_t info{};
  if (name.empty() || H5Oget_info_by_name(p_->file.get(), name.c_str(), &info, H5P_DEFAULT) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  return info.type == H5O_TYPE_DATASET;
}

std::vector<std::string> MetaFile::members(const std::string& group) const {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  std::vector<std::string> names;
  hsize_t idx = 0;
  const std::string g = group.empty() ? "/" : group;
  p_->ctx.check(H5Literate_by_name(p_->file.get(), g.c_str(), H5_INDEX_NAME, H5_ITER_INC, &idx,
                                   collect, &names, H5P_DEFAULT),
                "cannot list group " + object_name(group));
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<int64_t> MetaFile::shape(const std::string& dataset) const {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  const Context& ctx = p_->ctx;
  Handle ds = ctx.check(H5Dopen2(p_->file.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose,
                        "cannot open dataset " + single_quoted(dataset));
  Handle space = ctx.check(H5Dget_space(ds.get()), H5Sclose,
                           "cannot read the shape of " + single_quoted(dataset));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  if (rank < 0 || H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
    ctx.fail_h5("cannot read the shape of " + single_quoted(dataset));
  }
  return std::vector<int64_t>(dims.begin(), dims.end());
}

bool MetaFile::has_attribute(const std::string& object, const std::string& name) const {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  const std::string o = object.empty() ? "/" : object;
  const htri_t e = H5Aexists_by_name(p_->file.get(), o.c_str(), name.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return e > 0;
}

namespace {

// The n values of an attribute or dataset of `type` as doubles: numbers, or
// h5py's bools (an enum {FALSE, TRUE} over int8); read(memory type, buffer)
// reads them.
template <class Read>
std::vector<double> read_numbers(const Context& ctx, hid_t type, hssize_t n,
                                 const std::string& what, const char* not_numbers, Read&& read) {
  const H5T_class_t cls = H5Tget_class(type);
  std::vector<double> out(static_cast<size_t>(n));
  if (cls == H5T_FLOAT || cls == H5T_INTEGER) {
    if (n > 0) ctx.check(read(H5T_NATIVE_DOUBLE, out.data()), "cannot read " + what);
  } else if (cls == H5T_ENUM) {
    Handle mem = ctx.check(H5Tget_native_type(type, H5T_DIR_ASCEND), H5Tclose,
                           "cannot map the type of " + what);
    const size_t size = H5Tget_size(mem.get());
    std::vector<unsigned char> raw(size * static_cast<size_t>(n));
    if (n > 0) ctx.check(read(mem.get(), raw.data()), "cannot read " + what);
    out = widen_enum(raw, size, n);
  } else {
    ctx.fail(what + not_numbers);
  }
  return out;
}

}  // namespace

std::vector<double> MetaFile::numbers(const std::string& object, const std::string& name) const {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  const Context& ctx = p_->ctx;
  const std::string what = "attribute " + single_quoted(name) + " of " + object_name(object);
  const std::string o = object.empty() ? "/" : object;
  Handle attr =
      ctx.check(H5Aopen_by_name(p_->file.get(), o.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
                H5Aclose, "no " + what);
  Handle space = ctx.check(H5Aget_space(attr.get()), H5Sclose, "cannot read the shape of " + what);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) ctx.fail_h5("cannot read the shape of " + what);
  Handle type = ctx.check(H5Aget_type(attr.get()), H5Tclose, "cannot read the type of " + what);
  return read_numbers(ctx, type.get(), n, what, " is not a number",
                      [&](hid_t mem, void* buf) { return H5Aread(attr.get(), mem, buf); });
}

std::vector<double> MetaFile::values(const std::string& dataset) const {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  const Context& ctx = p_->ctx;
  const std::string what = "dataset " + single_quoted(dataset);
  Handle ds = ctx.check(H5Dopen2(p_->file.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose,
                        "cannot open " + what);
  Handle space = ctx.check(H5Dget_space(ds.get()), H5Sclose, "cannot read the shape of " + what);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) ctx.fail_h5("cannot read the shape of " + what);
  Handle type = ctx.check(H5Dget_type(ds.get()), H5Tclose, "cannot read the type of " + what);
  return read_numbers(ctx, type.get(), n, what, " holds no numbers", [&](hid_t mem, void* buf) {
    return H5Dread(ds.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  });
}

double MetaFile::number(const std::string& object, const std::string& name) const {
  const auto v = numbers(object, name);
  if (v.size() != 1) {
    fail("attribute " + single_quoted(name) + " of " + object_name(object) + " holds " +
         std::to_string(v.size()) + " values, expected one");
  }
  return v[0];
}

std::vector<std::string> MetaFile::strings(const std::string& object,
                                           const std::string& name) const {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietErrors quiet;
  const Context& ctx = p_->ctx;
  const std::string what = "attribute " + single_quoted(name) + " of " + object_name(object);
  const std::string o = object.empty() ? "/" : object;
  Handle attr =
      ctx.check(H5Aopen_by_name(p_->file.get(), o.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
                H5Aclose, "no " + what);
  Handle space = ctx.check(H5Aget_space(attr.get()), H5Sclose, "cannot read the shape of " + what);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  Handle type = ctx.check(H5Aget_type(attr.get()), H5Tclose, "cannot read the type of " + what);
  if (n < 0) ctx.fail_h5("cannot read the shape of " + what);
  std::vector<std::string> out;
  if (n == 0) return out;  // h5py writes [] as an empty float array
  if (H5Tget_class(type.get()) != H5T_STRING) ctx.fail(what + " is not a string");
  Handle mem = ctx.check(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create a string type");
  H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
  const htri_t vlen = H5Tis_variable_str(type.get());
  if (vlen > 0) {
    H5Tset_size(mem.get(), H5T_VARIABLE);
    std::vector<char*> texts(static_cast<size_t>(n), nullptr);
    ctx.check(H5Aread(attr.get(), mem.get(), texts.data()), "cannot read " + what);
    for (char* t : texts) {
      out.emplace_back(t != nullptr ? t : "");
      if (t != nullptr) H5free_memory(t);
    }
  } else {
    const size_t size = H5Tget_size(type.get());
    H5Tset_size(mem.get(), size);
    H5Tset_strpad(mem.get(), H5T_STR_NULLPAD);
    std::string buf(size * static_cast<size_t>(n), '\0');
    ctx.check(H5Aread(attr.get(), mem.get(), buf.data()), "cannot read " + what);
    for (hssize_t i = 0; i < n; ++i) {
      out.emplace_back(buf.substr(static_cast<size_t>(i) * size, size).c_str());
    }
  }
  return out;
}

}  // namespace fno::data::h5
