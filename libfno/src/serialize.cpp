#include <fno/serialize.h>
#include <fno/torch_file.h>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>
#include <torch/torch.h>
#include <c10/util/hash.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>

namespace fno {

TensorDict load_tensor_dict(const std::string& path) {
  const c10::IValue value = read_torch_file(path);
  if (!value.isGenericDict()) {
    throw std::runtime_error(path + ": expected a dict of tensors, found " + value.tagKind());
  }
  TensorDict out;
  for (const auto& item : value.toGenericDict()) {
    // Skip non-tensor entries, such as neuraloperator's "_metadata".
    if (!item.key().isString() || !item.value().isTensor()) continue;
    out.insert(item.key().toStringRef(), item.value().toTensor());
  }
  return out;
}

void write_file_atomic(const std::string& path, const char* data, size_t size) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmpl = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) {
    throw std::runtime_error(path + ": cannot create a temporary file in " + dir.string() + ": " +
                             std::strerror(errno));
  }
  // mkstemp creates the file 0600; give it the usual 0666 less the umask.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmpl.c_str());
    throw std::runtime_error(path + ": " + what + ": " + std::strerror(err));
  };
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync failed");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmpl.c_str());
    throw std::runtime_error(path + ": close failed: " + std::strerror(err));
  }
  if (::rename(tmpl.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmpl.c_str());
    throw std::runtime_error(path + ": rename failed: " + std::strerror(err));
  }
  // Make the rename itself durable.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::vector<char> to_torch_save_bytes(const TensorDict& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& item : tensors) {
    dict.insert(item.key(), item.value().detach().to(torch::kCPU).contiguous());
  }
  // torch::pickle_save wraps the dict in torch.jit._pickle.restore_type_tag,
  // which torch.load(weights_only=True), the Python default, refuses. Pickle a
  // plain dict instead (tag_aggregates = false) into the same zip layout.
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* bytes, size_t n) { pickle.insert(pickle.end(), bytes, bytes + n); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(dict);
  pickler.stop();
  std::vector<char> zip;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t n) {
    const char* b = static_cast<const char*>(bytes);
    zip.insert(zip.end(), b, b + n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
  return zip;
}

void save_tensor_dict(const TensorDict& tensors, const std::string& path) {
  const std::vector<char> bytes = to_torch_save_bytes(tensors);
  write_file_atomic(path, bytes.data(), bytes.size());
}

std::string tensor_dict_digest(const TensorDict& tensors) {
  std::string bytes;
  for (const auto& item : tensors) {
    const auto t = item.value().detach().to(torch::kCPU).contiguous();
    bytes += item.key() + '\0' + std::string(c10::toString(t.scalar_type())) + '\0' +
             c10::str(t.sizes()) + '\0';
    bytes.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  return c10::sha1(bytes).str();
}

namespace {
constexpr const char* kDigestKey = "meta.sha1";
}

std::vector<char> checkpoint_file_bytes(const TensorDict& tensors) {
  TensorDict with_digest = tensors;
  const std::string digest = tensor_dict_digest(tensors);
  with_digest.insert(kDigestKey, torch::tensor(std::vector<uint8_t>(digest.begin(), digest.end()),
                                               torch::kUInt8));
  return to_torch_save_bytes(with_digest);
}

void save_checkpoint_file(const TensorDict& tensors, const std::string& path) {
  const auto bytes = checkpoint_file_bytes(tensors);
  write_file_atomic(path, bytes.data(), bytes.size());
}

TensorDict load_checkpoint_file(const std::string& path) {
  TensorDict all = load_tensor_dict(path);
  const auto* stored = all.find(kDigestKey);
  if (stored == nullptr) throw std::runtime_error(path + ": not a checkpoint (no " + kDigestKey + ")");
  const auto u8 = stored->to(torch::kUInt8).contiguous();
  const std::string expected(reinterpret_cast<const char*>(u8.data_ptr<uint8_t>()), u8.numel());
  TensorDict tensors;
  for (const auto& item : all) {
    if (item.key() != kDigestKey) tensors.insert(item.key(), item.value());
  }
  if (tensor_dict_digest(tensors) != expected) {
    throw std::runtime_error(path + ": checkpoint is damaged (SHA-1 mismatch)");
  }
  return tensors;
}

TensorDict state_dict(const torch::nn::Module& module) {
  TensorDict out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) out.insert(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.insert(b.key(), b.value());
  return out;
}

void load_state_dict(torch::nn::Module& module, const TensorDict& tensors, bool strict) {
  auto own = state_dict(module);
  std::vector<std::string> missing, unexpected;
  for (const auto& item : own) {
    if (!tensors.contains(item.key())) missing.push_back(item.key());
  }
  for (const auto& item : tensors) {
    if (!own.contains(item.key())) unexpected.push_back(item.key());
  }
  auto join = [](const std::vector<std::string>& v) {
    std::ostringstream s;
    for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
    return s.str();
  };
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::ostringstream msg;
    msg << "state_dict does not match the model:";
    if (!missing.empty()) msg << " missing keys [" << join(missing) << "]";
    if (!unexpected.empty()) msg << " unexpected keys [" << join(unexpected) << "]";
    throw std::runtime_error(msg.str());
  }
  torch::NoGradGuard no_grad;
  for (auto& item : own) {
    const auto* src = tensors.find(item.key());
    if (src == nullptr) continue;
    auto& dst = item.value();
    if (src->sizes() != dst.sizes()) {
      std::ostringstream msg;
      msg << "state_dict key '" << item.key() << "': shape " << src->sizes()
          << " does not match the model's " << dst.sizes();
      throw std::runtime_error(msg.str());
    }
    if (src->is_complex() != dst.is_complex() || (!src->is_floating_point() && !src->is_complex())) {
      std::ostringstream msg;
      msg << "state_dict key '" << item.key() << "': dtype " << src->scalar_type()
          << " does not match the model's " << dst.scalar_type();
      throw std::runtime_error(msg.str());
    }
    dst.copy_(*src);
  }
}

}  // namespace fno
