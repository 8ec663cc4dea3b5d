// Internal to data/: what the benchmark readers (benchmark*.cpp) read of an
// HDF5 file besides arrays: which objects exist, group members, shapes, and
// attributes (numbers, h5py's bools, strings and lists of them). Errors are
// one line that starts with the file name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fno::data::h5 {

class MetaFile {
 public:
  /// Opens `path` for reading; fails naming it.
  explicit MetaFile(const std::string& path);
  ~MetaFile();
  MetaFile(const MetaFile&) = delete;
  MetaFile& operator=(const MetaFile&) = delete;

  const std::string& path() const;
  [[noreturn]] void fail(const std::string& message) const;
  bool is_group(const std::string& name) const;
  bool is_dataset(const std::string& name) const;
  /// The names in a group, sorted ("" or "/": the root).
  std::vector<std::string> members(const std::string& group) const;
  /// A dataset's shape.
  std::vector<int64_t> shape(const std::string& dataset) const;
  bool has_attribute(const std::string& object, const std::string& name) const;
  /// A numeric, bool (h5py's enum) attribute, scalar or 1-D, as doubles.
  std::vector<double> numbers(const std::string& object, const std::string& name) const;
  /// A string attribute, scalar or 1-D (variable or fixed length).
  std::vector<std::string> strings(const std::string& object, const std::string& name) const;
  /// numbers() of one value that must be there: fails naming object and attribute.
  double number(const std::string& object, const std::string& name) const;
  /// A small dataset's values (numbers or h5py's bools), whole, in stored
  /// order, as doubles (shape() gives their shape).
  std::vector<double> values(const std::string& dataset) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

}  // namespace fno::data::h5
