// torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, ...) as a LaunchEnv,
// each bad value named in one line.
#include <fno_train/distributed.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace fno::dist {
namespace {

int64_t env_int(const char* name, int64_t fallback, bool required) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    if (required) {
      throw Error(std::string(name) + " is not set (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, " +
                  "MASTER_ADDR and MASTER_PORT)");
    }
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0') {
    throw Error(std::string(name) + "='" + v + "' is not an integer");
  }
  return x;
}

}  // namespace

std::optional<LaunchEnv> launch_env() {
  const bool has_rank = std::getenv("RANK") != nullptr;
  const bool has_world = std::getenv("WORLD_SIZE") != nullptr;
  if (!has_rank && !has_world) return std::nullopt;
  LaunchEnv e;
  e.rank = env_int("RANK", 0, true);
  e.world_size = env_int("WORLD_SIZE", 1, true);
  if (e.world_size < 1) throw Error("WORLD_SIZE=" + std::to_string(e.world_size) + " must be >= 1");
  if (e.rank < 0 || e.rank >= e.world_size) {
    throw Error("RANK=" + std::to_string(e.rank) + " is outside 0.." +
                std::to_string(e.world_size - 1) + " (WORLD_SIZE=" + std::to_string(e.world_size) +
                ")");
  }
  e.local_rank = env_int("LOCAL_RANK", e.world_size == 1 ? 0 : e.rank, false);
  e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size, false);
  if (e.local_world_size < 1 || e.local_rank < 0 || e.local_rank >= e.local_world_size) {
    throw Error("LOCAL_RANK=" + std::to_string(e.local_rank) + " is outside 0.." +
                std::to_string(e.local_world_size - 1) + " (LOCAL_WORLD_SIZE)");
  }
  if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != '\0') {
    e.master_addr = a;
  } else if (e.world_size > 1) {
    throw Error("MASTER_ADDR is not set (the address of rank 0's machine)");
  }
  e.master_port = env_int("MASTER_PORT", 29500, e.world_size > 1);
  if (e.master_port < 1 || e.master_port > 65535) {
    throw Error("MASTER_PORT=" + std::to_string(e.master_port) + " is outside 1..65535");
  }
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent != nullptr && std::string(agent) == "True";
  return e;
}

}  // namespace fno::dist
