#include "distributed_impl.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <c10/util/Logging.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace fno::dist {

using detail::first_line;
using detail::real_view;

namespace {

// Host numbers on the group's device without waiting for its stream: a
// pageable host-to-device copy waits for the work queued before it, so a
// step stuck on a dead peer would block the host before the collective could
// time out. From pinned memory the copy is queued, and the collective's
// blocking wait, bounded by the timeout, is where the host waits.
at::Tensor on_device(const at::Tensor& host, const torch::Device& device) {
  if (!device.is_cuda()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

// Milliseconds since the epoch, for heartbeats.
int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// c10d's NCCL settings, set once a process before its first group's
// rendezvous: failures become exceptions in wait(), never an abort of the
// process (blocking waits with the timeout, communicators cleaned up on error,
// no monitoring thread that would kill the process). A user's settings win.
// Once: setenv may move the environment under a getenv of another thread,
// and ranks may be threads of one process (the unit tests), each of whose
// c10d reads its settings with getenv while the others set theirs.
void nccl_env_defaults() {
  static std::once_flag once;
  std::call_once(once, [] {
    setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
    setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", 0);
    setenv("TORCH_NCCL_ENABLE_MONITORING", "0", 0);
    setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "0", 0);
    setenv("TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN", "0", 0);
  });
}

}  // namespace

// ---------------------------------------------------------------------------
// Group

std::string to_string(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kNccl:
      return "nccl";
    case Backend::kGloo:
      return "gloo";
  }
  return "?";
}

// Creates the backend of `p` (p.backend_name, over p.store) and starts its
// heartbeats.
static void start_backend(Group::Impl& p, std::chrono::milliseconds timeout) {
  const auto& env = p.env;
  const auto& backend = p.backend_name;
  const auto& device = p.device;
  p.store->set("hb/" + std::to_string(env.rank), std::to_string(now_ms()));
  p.guarded(
      "creating the " + backend + " process group of " + std::to_string(env.world_size) + " ranks",
      [&] {
        if (backend == "gloo") {
#ifdef USE_C10D_GLOO
          auto o = c10d::ProcessGroupGloo::Options::create_default(timeout);
          p.backend = c10::make_intrusive<c10d::ProcessGroupGloo>(
              p.store, static_cast<int>(env.rank), static_cast<int>(env.world_size), o);
#else
          throw std::runtime_error("this build has no Gloo backend");
#endif
        } else {
#ifdef USE_C10D_NCCL
          // (c10d's settings: nccl_env_defaults, set when the world group began.)
          c10::cuda::set_device(device.index());
          auto o = c10d::ProcessGroupNCCL::Options::create();
          o->timeout = timeout;
          auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
              p.store, static_cast<int>(env.rank), static_cast<int>(env.world_size), o);
          // Bind the communicator to this rank's GPU now (lazily, NCCL would guess).
          nccl->setBoundDeviceId(device);
          p.backend = nccl;
#else
          throw std::runtime_error(
              "this build has no NCCL backend (nccl.h was not found at configure time)");
#endif
        }
        return 0;
      });
  p.heartbeat = std::thread([raw = &p] {
    while (!raw->stop.load()) {
      try {
        raw->store->set("hb/" + std::to_string(raw->env.rank), std::to_string(now_ms()));
      } catch (const std::exception&) {
        return;  // the store is gone; the next collective reports it
      }
      for (int i = 0; i < 10 && !raw->stop.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

std::shared_ptr<Group> Group::create(const LaunchEnv& env, const torch::Device& device,
                                     const GroupOptions& options) {
  auto p = std::make_unique<Impl>();
  p->env = env;
  p->device = device;
  p->timeout = options.timeout;
  const Backend chosen = options.backend != Backend::kAuto ? options.backend
                         : device.is_cuda()                ? Backend::kNccl
                                                           : Backend::kGloo;
  const std::string backend = to_string(chosen);
  if (backend == "nccl" && !device.is_cuda()) {
    throw Error(p->who() + ": the NCCL backend needs a CUDA device; this rank trains on " +
                device.str());
  }
  if (backend == "nccl") nccl_env_defaults();
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  // c10d logs its retries and a peer's loss as warnings with C++ backtraces;
  // our errors say it in one line. TORCH_CPP_LOG_LEVEL=WARNING brings them back.
  if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) FLAGS_caffe2_log_level = 2;  // ERROR
  // A write to a peer that has died must fail (EPIPE, which c10d turns into
  // the error this rank reports and exits 5 on), not kill this rank silently
  // with SIGPIPE: rank 0 did, exit 141, when rank 1 was killed while rank 0's
  // store or transport was writing to it.
  ::signal(SIGPIPE, SIG_IGN);
  // The rendezvous: rank 0 hosts the TCPStore unless torchrun's agent does;
  // the host waits (up to the timeout) for every rank to connect.
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = env.rank == 0 && !env.agent_store;
  so.numWorkers = static_cast<std::size_t>(env.world_size);
  so.waitWorkers = !env.agent_store;
  so.timeout = options.timeout;
  so.multiTenant = false;
  try {
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    p->store = c10::make_intrusive<c10d::PrefixStore>("fno", tcp);
  } catch (const c10::Error& e) {
    const std::string msg = first_line(e.what_without_backtrace());
    if (msg.find("EADDRINUSE") != std::string::npos || msg.find("in use") != std::string::npos) {
      throw Error(p->who() + ": MASTER_PORT " + std::to_string(env.master_port) +
                  " is already in use on " + env.master_addr +
                  "; choose another (torchrun --master-port)");
    }
    throw Error(p->who() + ": rendezvous at " + where +
                " with WORLD_SIZE=" + std::to_string(env.world_size) + " failed (do all " +
                std::to_string(env.world_size) + " ranks run?): " + msg);
  }
  p->backend_name = backend;
  start_backend(*p, options.timeout);
  std::shared_ptr<Group> g(new Group(std::move(p)));
  // Every rank is up: the first collective (a barrier) proves the links.
  g->barrier();
  return g;
}

std::shared_ptr<Group> Group::subgroup(const std::vector<int64_t>& ranks, const std::string& name) {
  const auto it = std::find(ranks.begin(), ranks.end(), rank());
  TORCH_CHECK(it != ranks.end(), "dist: rank ", rank(), " is not in subgroup '", name, "'");
  auto p = std::make_unique<Impl>();
  p->env = p_->env;
  p->env.rank = it - ranks.begin();
  p->env.world_size = static_cast<int64_t>(ranks.size());
  p->device = p_->device;
  p->timeout = p_->timeout;
  p->label = p_->who() + " (" + name + " rank " + std::to_string(p->env.rank) + ")";
  for (const int64_t r : ranks) p->world_ranks.push_back(p_->world_rank(r));
  p->store = c10::make_intrusive<c10d::PrefixStore>(name, p_->store);
  p->backend_name = p_->backend_name;
  p->inflight = p_->inflight;
  start_backend(*p, p_->timeout);
  std::shared_ptr<Group> g(new Group(std::move(p)));
  g->barrier();
  return g;
}

Group::Group(std::unique_ptr<Impl> impl) : p_(std::move(impl)) {}

Group::~Group() {
  p_->stop = true;
  if (p_->heartbeat.joinable()) p_->heartbeat.join();
  {
    // Its sums in flight, if any, are the other groups' no longer.
    std::lock_guard<std::mutex> lock(p_->inflight->mu);
    auto& q = p_->inflight->works;
    q.erase(std::remove_if(q.begin(), q.end(),
                           [&](const Impl::Pending& w) { return w.owner == p_.get(); }),
            q.end());
  }
  if (p_->failed || p_->inflight->failed) {
    // Deliberately leaked (see Impl::failed); the process is about to exit.
    p_->backend.release();
    p_->store.release();
  }
}

int64_t Group::rank() const { return p_->env.rank; }
int64_t Group::size() const { return p_->env.world_size; }
int64_t Group::local_rank() const { return p_->env.local_rank; }
int64_t Group::local_size() const { return p_->env.local_world_size; }
std::string Group::backend_name() const { return p_->backend_name; }
torch::Device Group::device() const { return p_->device; }

void Group::broadcast_from_main(const std::vector<torch::Tensor>& tensors) {
  drain();
  for (const auto& t : tensors) {
    TORCH_CHECK(t.device() == p_->device, "dist: broadcast of a tensor on ", t.device(),
                ", the group is on ", p_->device);
    std::vector<at::Tensor> one{real_view(t)};
    c10d::BroadcastOptions o;
    o.rootRank = 0;
    auto work = p_->guarded("broadcasting rank 0's parameters",
                            [&] { return p_->backend->broadcast(one, o); });
    p_->wait(work, "broadcasting rank 0's parameters");
  }
}

void Group::all_reduce_sum(torch::Tensor& t) {
  drain();
  std::vector<at::Tensor> one{real_view(t)};
  auto work = p_->guarded("all-reduce", [&] { return p_->backend->allreduce(one); });
  p_->wait(work, "all-reduce");
}

int64_t Group::all_reduce_sum_ordered(torch::Tensor& t) {
  std::vector<torch::Tensor> one{t};
  return all_reduce_sum_ordered(one);
}

int64_t Group::all_reduce_sum_ordered(std::vector<torch::Tensor>& ts) {
  if (p_->backend_name != "nccl") {
    // Gloo's work completes on its own threads; synchronize() would not wait.
    for (auto& t : ts) all_reduce_sum(t);
    return static_cast<int64_t>(ts.size());
  }
  std::lock_guard<std::mutex> lock(p_->inflight->mu);
  // Lag 1: the host waits for every sum in flight but the latest before it
  // starts these, so it never runs more than one sum ahead of the device.
  const int64_t blocked = Impl::settle_locked(p_->inflight->works, 1);
  for (auto& t : ts) {
    std::vector<at::Tensor> one{real_view(t)};
    auto work = p_->guarded("all-reduce", [&] {
      auto w = p_->backend->allreduce(one);
      w->synchronize();  // the current stream waits for NCCL's; the host does not
      return w;
    });
    p_->inflight->works.push_back({std::move(work), p_.get()});
  }
  return blocked;
}

int64_t Group::drain() { return p_->settle(0); }

std::vector<double> Group::all_reduce_sum(const std::vector<double>& values) {
  if (values.empty()) return {};
  auto t = on_device(torch::tensor(values, torch::kDouble), p_->device);
  all_reduce_sum(t);
  t = t.cpu();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

int64_t Group::all_reduce_max(int64_t value) {
  drain();
  auto t = on_device(torch::tensor({value}, torch::kLong), p_->device);
  std::vector<at::Tensor> one{t};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  auto work = p_->guarded("all-reduce", [&] { return p_->backend->allreduce(one, o); });
  p_->wait(work, "all-reduce");
  return t.cpu().item<int64_t>();
}

void Group::barrier() {
  // An all-reduce of one number: NCCL's barrier() would guess the device.
  all_reduce_max(0);
}

}  // namespace fno::dist
