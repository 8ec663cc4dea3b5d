#include "golden.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <stdexcept>

namespace fno::test {

std::string golden_path(const std::string& name) { return std::string(FNO_GOLDEN_DIR) + "/" + name; }

std::string out_path(const std::string& name) { return std::string(FNO_TEST_OUT_DIR) + "/" + name; }

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

const TensorDict& golden(const std::string& file) {
  static std::map<std::string, TensorDict> cache;
  auto it = cache.find(file);
  if (it == cache.end()) it = cache.emplace(file, load_tensor_dict(golden_path(file))).first;
  return it->second;
}

torch::Tensor golden_tensor(const std::string& file, const std::string& key) {
  const auto* t = golden(file).find(key);
  if (t == nullptr) throw std::runtime_error(file + ": no key '" + key + "'");
  return *t;
}

double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE_MESSAGE(a.sizes() == b.sizes(), "shape ", a.sizes(), " vs ", b.sizes());
  auto a64 = a.detach().to(torch::kCPU);
  auto b64 = b.detach().to(torch::kCPU);
  a64 = a64.is_complex() ? a64.to(torch::kComplexDouble) : a64.to(torch::kDouble);
  b64 = b64.is_complex() ? b64.to(torch::kComplexDouble) : b64.to(torch::kDouble);
  const double num = (a64 - b64).abs().pow(2).sum().sqrt().item<double>();
  const double den = b64.abs().pow(2).sum().sqrt().item<double>();
  if (den == 0.0) return num;
  return num / den;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void check_one_line_error(const std::function<void()>& fn, const std::string& path,
                          const std::string& expected) {
  INFO("file ", path);
  try {
    fn();
    FAIL("no error for ", path);
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    INFO("message: ", msg);
    CHECK(msg.rfind(path, 0) == 0);
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(msg.find(expected) != std::string::npos);
  }
}

}  // namespace fno::test
