#include <fno_train/distributed.h>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

namespace fno::dist {
namespace {

std::string first_line(const std::string& s) {
  // c10d's messages may carry a C++ backtrace after the first line.
  return s.substr(0, s.find('\n'));
}

// Complex tensors travel as their real views (both parts); real ones as they are.
at::Tensor real_view(const at::Tensor& t) { return t.is_complex() ? at::view_as_real(t) : t; }

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

}  // namespace

// ---------------------------------------------------------------------------
// Group

struct Group::Impl {
  LaunchEnv env;
  torch::Device device{torch::kCPU};
  std::chrono::milliseconds timeout{};
  c10::intrusive_ptr<c10d::Store> store;  // prefixed "fno/"
  c10::intrusive_ptr<c10d::Backend> backend;
  std::string backend_name;

  // Heartbeats: every rank stamps "hb/<rank>" in the store each second, so
  // that a rank whose collective fails can name the ranks that went silent.
  std::atomic<bool> stop{false};
  std::thread heartbeat;
  // After a failed collective the backend is left alone at exit: tearing down
  // communicators with a peer gone can block.
  std::atomic<bool> failed{false};

  // A subgroup's ranks are named by their rank in the world too.
  std::string label;
  // A subgroup's rank r is rank world_ranks[r] of the world (empty: the world).
  std::vector<int64_t> world_ranks;
  int64_t world_rank(int64_t r) const {
    return world_ranks.empty() ? r : world_ranks[static_cast<size_t>(r)];
  }
  std::string who() const { return label.empty() ? "rank " + std::to_string(env.rank) : label; }

  // The ranks whose heartbeat stopped: read every stamp, wait a few beats,
  // read again. "" when all are alive (or this rank is alone).
  std::string silent_ranks() {
    std::ostringstream o;
    try {
      const auto stamps = [&] {
        std::vector<std::string> v(static_cast<size_t>(env.world_size));
        for (int64_t r = 0; r < env.world_size; ++r) {
          const std::string key = "hb/" + std::to_string(r);
          if (r != env.rank && store->check({key})) {
            const auto b = store->get(key);
            v[static_cast<size_t>(r)].assign(b.begin(), b.end());
          }
        }
        return v;
      };
      const auto before = stamps();
      std::this_thread::sleep_for(std::chrono::milliseconds(3000));
      const auto after = stamps();
      for (int64_t r = 0; r < env.world_size; ++r) {
        if (r != env.rank && before[static_cast<size_t>(r)] == after[static_cast<size_t>(r)]) {
          o << (o.tellp() > 0 ? ", " : "") << world_rank(r);
        }
      }
    } catch (const std::exception&) {
      // The store itself is gone: it lives in rank 0 (or torchrun's agent).
      return env.agent_store ? "" : "0 (which hosts the rendezvous store)";
    }
    return o.str();
  }

  // Runs a c10d call; its failure becomes one line naming this rank and, when
  // the heartbeats tell, the ranks that went silent.
  template <class F>
  auto guarded(const std::string& what, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error&) {
      throw;
    } catch (const c10::Error& e) {
      fail(what, e.what_without_backtrace());
    } catch (const std::exception& e) {
      fail(what, e.what());
    }
    throw Error("unreachable");
  }

  [[noreturn]] void fail(const std::string& what, const std::string& msg) {
    failed = true;
    const std::string silent = store ? silent_ranks() : "";
    throw Error(who() + ": " + what + " failed" +
                (silent.empty() ? std::string() : " (rank " + silent + " stopped responding)") +
                ": " + first_line(msg));
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
    guarded(what, [&] {
      if (!work->wait(timeout))
        throw std::runtime_error("timed out after " + std::to_string(timeout.count()) + " ms");
      return 0;
    });
  }
};

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
          // Failures become exceptions in wait(), never an abort of the process:
          // blocking waits with the timeout, communicators cleaned up on error, no
          // monitoring thread that would kill the process. A user's settings win.
          setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
          setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", 0);
          setenv("TORCH_NCCL_ENABLE_MONITORING", "0", 0);
          setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "0", 0);
          setenv("TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN", "0", 0);
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
  start_backend(*p, p_->timeout);
  std::shared_ptr<Group> g(new Group(std::move(p)));
  g->barrier();
  return g;
}

Group::Group(std::unique_ptr<Impl> impl) : p_(std::move(impl)) {}

Group::~Group() {
  p_->stop = true;
  if (p_->heartbeat.joinable()) p_->heartbeat.join();
  if (p_->failed) {
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
  std::vector<at::Tensor> one{real_view(t)};
  auto work = p_->guarded("all-reduce", [&] { return p_->backend->allreduce(one); });
  p_->wait(work, "all-reduce");
}

std::vector<double> Group::all_reduce_sum(const std::vector<double>& values) {
  if (values.empty()) return {};
  auto t = on_device(torch::tensor(values, torch::kDouble), p_->device);
  all_reduce_sum(t);
  t = t.cpu();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

int64_t Group::all_reduce_max(int64_t value) {
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

// ---------------------------------------------------------------------------
// GradientSync

struct GradientSync::Impl {
  std::shared_ptr<Group> group;
  std::vector<at::Tensor> params;
  // Keeps each parameter's AccumulateGrad node (and our hook on it) alive;
  // empty while the hooks are off (set_hooks(false)).
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> hooks;  // the keys of ours, one on each node

  // A post hook on each parameter's AccumulateGrad: it runs after every
  // accumulation into .grad (the nested backward of recompute included). The
  // node is made (or found) here, on the current stream: autograd runs a
  // parameter's accumulation on the stream its node was made on, and a step
  // captured on another stream would wait for that one inside the capture
  // (the legacy default stream's implicit dependency, which ends a capture).
  void attach() {
    if (!accumulators.empty()) return;
    for (size_t i = 0; i < params.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params[i]);
      TORCH_CHECK(acc, "GradientSync: parameter ", i, " is not a leaf that accumulates gradients");
      Impl* raw = this;
      hooks.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [raw, i](const torch::autograd::variable_list& outputs,
                   const torch::autograd::variable_list&) {
            raw->accumulated(i);
            return outputs;
          })));
      accumulators.push_back(std::move(acc));
    }
  }

  // Our hooks off their nodes, and the nodes let go: the next forward makes
  // new ones on its own stream.
  void detach() {
    for (size_t i = 0; i < accumulators.size(); ++i) accumulators[i]->del_post_hook(hooks[i]);
    accumulators.clear();
    hooks.clear();
  }

  struct Bucket {
    std::vector<size_t> params;  // indices into params
    std::vector<int64_t> offsets;
    at::Tensor flat;  // float, the real views of the gradients back to back
    int64_t pending = 0;
    bool launched = false;
    c10::intrusive_ptr<c10d::Work> work;
  };
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;  // param -> bucket

  std::mutex mu;
  bool armed = false;
  std::string key;
  std::unordered_map<std::string, std::vector<int64_t>> expected;  // key -> accumulations per param
  const std::vector<int64_t>* want = nullptr;                      // expected[key], when learned
  std::vector<int64_t> count;
  size_t next = 0;  // the next bucket to launch (in order, on every rank)
  int64_t overlapped = 0;
  std::string violation;

  // Bucket b's gradients into its flat buffer (zeros where a parameter has none).
  void fill(size_t b) {
    auto& bk = buckets[b];
    for (size_t k = 0; k < bk.params.size(); ++k) {
      const auto& p = params[bk.params[k]];
      auto dst = bk.flat.narrow(0, bk.offsets[k], bk.offsets[k + 1] - bk.offsets[k]);
      if (p.grad().defined()) {
        dst.copy_(real_view(p.grad()).reshape({-1}));
      } else {
        dst.zero_();
      }
    }
  }

  // Bucket b's flat buffer back into its gradients.
  void write_back(size_t b) {
    auto& bk = buckets[b];
    for (size_t k = 0; k < bk.params.size(); ++k) {
      auto param = params[bk.params[k]];
      const auto src = bk.flat.narrow(0, bk.offsets[k], bk.offsets[k + 1] - bk.offsets[k]);
      if (!param.grad().defined()) param.mutable_grad() = at::zeros_like(param);
      real_view(param.grad()).copy_(src.view(real_view(param).sizes()));
    }
  }

  // Bucket b's all-reduce, started (finish() or reduce() waits for it).
  void start(size_t b) {
    auto& bk = buckets[b];
    std::vector<at::Tensor> one{bk.flat};
    bk.work = group->p_->guarded("gradient all-reduce",
                                 [&] { return group->p_->backend->allreduce(one); });
  }

  void launch(size_t b) {
    fill(b);
    start(b);
    buckets[b].launched = true;
  }

  void launch_ready() {
    while (next < buckets.size() && buckets[next].pending == 0) launch(next++);
  }

  // After an accumulation into params[i] (the AccumulateGrad post hook).
  void accumulated(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (!armed) return;
    ++count[i];
    if (want == nullptr) return;  // learning this key: everything is reduced in finish()
    const int64_t w = (*want)[i];
    auto& bk = buckets[bucket_of[i]];
    if (count[i] > w || bk.launched) {
      if (violation.empty()) {
        violation = "parameter " + std::to_string(i) + " accumulated a gradient " +
                    std::to_string(count[i]) + " times, more than the " + std::to_string(w) +
                    " times learned for '" + key + "'";
      }
      return;
    }
    if (count[i] == w && --bk.pending == 0) {
      launch_ready();
      // Launched before finish(): overlapping backward.
      overlapped = static_cast<int64_t>(next);
    }
  }
};

GradientSync::GradientSync(std::shared_ptr<Group> group, std::vector<torch::Tensor> params,
                           GradientSyncOptions options)
    : p_(std::make_unique<Impl>()) {
  auto& p = *p_;
  p.group = std::move(group);
  TORCH_CHECK(p.group, "GradientSync: no process group");
  TORCH_CHECK(options.bucket_bytes > 0, "GradientSync: bucket_bytes must be > 0, got ",
              options.bucket_bytes);
  for (auto& t : params) {
    if (t.requires_grad()) p.params.push_back(t);
  }
  // Buckets in reverse parameter order, each up to bucket_bytes of float.
  p.bucket_of.assign(p.params.size(), 0);
  Impl::Bucket cur;
  int64_t bytes = 0;
  const auto close = [&] {
    if (cur.params.empty()) return;
    cur.flat = at::zeros({cur.offsets.back()},
                         at::TensorOptions().dtype(at::kFloat).device(p.group->device()));
    p.buckets.push_back(std::move(cur));
    cur = Impl::Bucket();
    bytes = 0;
  };
  for (size_t k = p.params.size(); k-- > 0;) {
    const auto& t = p.params[k];
    TORCH_CHECK(t.device() == p.group->device(), "GradientSync: parameter ", k, " is on ",
                t.device(), ", the group on ", p.group->device());
    TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kComplexFloat,
                "GradientSync: parameter ", k, " is ", t.scalar_type(),
                "; float and complex float are reduced");
    const int64_t n = real_view(t).numel();
    if (!cur.params.empty() && (bytes + n * 4) > options.bucket_bytes) close();
    if (cur.offsets.empty()) cur.offsets.push_back(0);
    p.bucket_of[k] = p.buckets.size();
    cur.params.push_back(k);
    cur.offsets.push_back(cur.offsets.back() + n);
    bytes += n * 4;
  }
  close();
  p.count.assign(p.params.size(), 0);
  p.attach();
}

GradientSync::~GradientSync() {
  // The hooks outlive nothing: off their nodes before this goes.
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->armed = false;
  p_->detach();
}

void GradientSync::set_hooks(bool on) {
  std::lock_guard<std::mutex> lock(p_->mu);
  TORCH_CHECK(!p_->armed, "GradientSync: set_hooks during an armed step");
  if (on) {
    p_->attach();
  } else {
    p_->detach();
  }
}

void GradientSync::arm(const std::string& key) {
  auto& p = *p_;
  std::lock_guard<std::mutex> lock(p.mu);
  p.armed = true;
  p.key = key;
  p.count.assign(p.params.size(), 0);
  p.next = 0;
  p.overlapped = 0;
  p.violation.clear();
  auto it = p.expected.find(key);
  p.want = it == p.expected.end() ? nullptr : &it->second;
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    auto& bk = p.buckets[b];
    bk.launched = false;
    bk.work.reset();
    bk.pending = 0;
    if (p.want != nullptr) {
      for (size_t i : bk.params) bk.pending += (*p.want)[i] > 0 ? 1 : 0;
    } else {
      bk.pending = 1;  // held until finish()
    }
  }
  // Buckets whose parameters get no gradient in this step are ready at once:
  // they are launched with the first real one, in order.
}

void GradientSync::finish() {
  auto& p = *p_;
  std::unique_lock<std::mutex> lock(p.mu);
  if (!p.armed) return;
  p.armed = false;
  if (!p.violation.empty()) {
    throw Error(p.group->p_->who() + ": gradient sync: " + p.violation);
  }
  if (p.want == nullptr) {
    p.expected[p.key] = p.count;
  }
  for (auto& bk : p.buckets) bk.pending = 0;
  p.launch_ready();
  lock.unlock();
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    auto& bk = p.buckets[b];
    p.group->p_->wait(bk.work, "gradient all-reduce");
    p.write_back(b);
    bk.work.reset();
  }
}

void GradientSync::pack() {
  auto& p = *p_;
  for (size_t b = 0; b < p.buckets.size(); ++b) p.fill(b);
}

void GradientSync::reduce() {
  auto& p = *p_;
  for (size_t b = 0; b < p.buckets.size(); ++b) p.start(b);
  for (auto& bk : p.buckets) {
    p.group->p_->wait(bk.work, "gradient all-reduce");
    bk.work.reset();
  }
}

void GradientSync::unpack() {
  auto& p = *p_;
  for (size_t b = 0; b < p.buckets.size(); ++b) p.write_back(b);
}

int64_t GradientSync::buckets() const { return static_cast<int64_t>(p_->buckets.size()); }
int64_t GradientSync::overlapped_last_step() const { return p_->overlapped; }

}  // namespace fno::dist
