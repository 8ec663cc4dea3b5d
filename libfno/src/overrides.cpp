#include <fno/overrides.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

namespace fno {

const std::vector<Override>& overrides() {
  static const std::vector<Override> list{
      {"FNO_FUSED", "0: every fused CUDA kernel off (the LibTorch path throughout)"},
      {"FNO_FUSED_MLP", "0: channel MLPs on the LibTorch path, the block tail still fused"},
      {"FNO_FUSED_MLP_BACKWARD", "0: the channel MLPs' two-pass backward instead of the one-pass"},
      {"FNO_FUSED_LOSS", "0: the relative H1 loss on the LibTorch path"},
      {"FNO_GELU_FORK", "0: a block's input GELU and its gradient sum by autograd"},
      {"FNO_DFT_EXPAND", "0: the last dim's synthesis by cuBLAS instead of dft_expand.cu"},
      {"FNO_DFT_FIRST_DIM", "0: the first dim's kept modes from cuFFT and a gather"},
      {"FNO_DFT_MIDDLE_DIM", "0: a 3D conv's middle dim's kept modes from cuFFT and a gather"},
      {"FNO_BLOCK_TAIL_FP32", "3xtf32: the fp32 block tail in 3xTF32 both ways"},
      {"FNO_BLOCK_TAIL_FWD_CTAS", "N: the tensor-core forward's CTAs per SM"},
      {"FNO_BLOCK_TAIL_BWD_CTAS", "N: the tensor-core backward's CTAs per SM"},
      {"FNO_BLOCK_TAIL_L2_PREFETCH", "B: the L2 prefetch size of the kernels' copies"},
      {"FNO_BLOCK_TAIL_PACKED", "0: the 16-bit backward without packed operands"},
      {"FNO_NS_FUSED", "0: the Navier-Stokes generator's LibTorch step"},
      {"FNO_PLAN_CACHE", "DIR: where auto keeps its plans (offload.plan_cache '')"},
  };
  return list;
}

namespace {

// The values as first read, by name (nullptr: unset).
struct Values {
  std::mutex mutex;
  std::map<std::string, const char*> read;
};
Values& values() {
  static Values v;
  return v;
}

}  // namespace

const char* override_value(const char* name) {
  bool listed = false;
  for (const auto& o : overrides()) listed = listed || std::strcmp(o.name, name) == 0;
  if (!listed) throw std::logic_error(std::string("fno: '") + name + "' is not a listed override");
  auto& v = values();
  const std::lock_guard<std::mutex> lock(v.mutex);
  const auto it = v.read.find(name);
  if (it != v.read.end()) return it->second;
  const char* value = std::getenv(name);
  v.read.emplace(name, value);
  return value;
}

bool override_on(const char* name) {
  const char* value = override_value(name);
  return !(value != nullptr && std::strcmp(value, "0") == 0);
}

int override_int(const char* name, int fallback) {
  const char* value = override_value(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  return (end != nullptr && *end == '\0') ? static_cast<int>(v) : fallback;
}

std::vector<std::pair<std::string, std::string>> overrides_set() {
  std::vector<std::pair<std::string, std::string>> set;
  for (const auto& o : overrides()) {
    if (const char* value = override_value(o.name)) set.emplace_back(o.name, value);
  }
  return set;
}

void say_fallback(const std::string& what, const std::string& shape, const std::string& why) {
  static std::mutex mutex;
  static std::set<std::pair<std::string, std::string>> said;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!said.emplace(what, shape).second) return;
  }
  std::ostringstream line;
  line << "fno: " << what << " runs the LibTorch path for " << shape << ": " << why << "\n";
  std::cerr << line.str() << std::flush;
}

}  // namespace fno
