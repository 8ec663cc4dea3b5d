// Data-parallel training on torch.distributed's C++ engine: a c10d process
// group (NCCL on CUDA, Gloo on the CPU) over a TCPStore rendezvous, set up from
// the variables torchrun gives each process (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and a gradient all-reduce in
// buckets that start during backward.
//
//   torchrun --no-python --nproc-per-node 2 build/apps/fno_train --config configs/darcy.yaml
//
// What each rank does (DistributedDataParallel's semantics, README "Several GPUs"):
//   - rank 0's initial parameters are broadcast to every rank;
//   - each rank trains on its own shard of every epoch (data::epoch_batches
//     with rank and world size: DistributedSampler's shuffle and padding);
//   - gradients are reduced in buckets as backward produces them. Complex
//     gradients travel as their real views, both parts. The training losses
//     add over batch entries, so ranks add their gradients: the step equals one
//     process's step on the global batch (world_size x data.batch_size), as
//     DDP's average does for a mean loss;
//   - evaluation metrics and the training loss are reduced over all ranks;
//     rank 0 alone writes the run directory.
// A rank that dies, or a collective that does not finish within the timeout,
// raises dist::Error on the others, naming the rank that reports it.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fno::dist {

/// A failed rendezvous or collective: a peer died or hung, a port is taken.
/// what() is one line that names this process's rank.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Where this process sits in the job, as torchrun describes it.
struct LaunchEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  /// TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent hosts the TCPStore,
  /// and every rank is a client of it.
  bool agent_store = false;
};

/// The launch from the environment: nullopt when neither RANK nor WORLD_SIZE
/// is set (a plain single-process run). Throws Error naming the variable when
/// one is missing, not a number, or out of range (RANK >= WORLD_SIZE, a port
/// outside 1..65535).
std::optional<LaunchEnv> launch_env();

/// The c10d backend (config distributed.backend): kAuto takes NCCL for a CUDA
/// device and Gloo for the CPU.
enum class Backend { kAuto, kNccl, kGloo };
/// "auto" | "nccl" | "gloo".
std::string to_string(Backend backend);

struct GroupOptions {
  Backend backend = Backend::kAuto;
  /// Rendezvous and every collective: a peer silent for longer is an error.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

/// A process group of all ranks. Collectives are issued in the same order on
/// every rank; each call here blocks until it completes (or throws Error),
/// but all_reduce_sum_ordered, whose sum the device's stream waits for.
class Group {
 public:
  /// Joins the rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 hosts the store
  /// unless torchrun's agent does) and creates the backend for `device`.
  static std::shared_ptr<Group> create(const LaunchEnv& env, const torch::Device& device,
                                       const GroupOptions& options = {});
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  /// A group of some of this group's ranks (`ranks`, in this group's
  /// numbering; this rank among them), over the same store under the prefix
  /// `name`, which names one subgroup among those that take part. Every
  /// rank in `ranks` calls it, no other; its rank() is the position in `ranks`.
  std::shared_ptr<Group> subgroup(const std::vector<int64_t>& ranks, const std::string& name);

  int64_t rank() const;
  int64_t size() const;
  int64_t local_rank() const;
  int64_t local_size() const;
  bool is_main() const { return rank() == 0; }
  /// "nccl" or "gloo".
  std::string backend_name() const;
  torch::Device device() const;

  /// Every tensor takes rank 0's values (complex ones through their real views).
  void broadcast_from_main(const std::vector<torch::Tensor>& tensors);
  /// In place: the sum over ranks (complex: both parts).
  void all_reduce_sum(torch::Tensor& t);
  /// The same sum, ordered on the device's current stream. With NCCL it
  /// returns once the sum is started: what the current stream runs next reads
  /// the sum, and the host goes on queueing work. Before it starts, the host
  /// waits (each wait bounded by the timeout) for the sums still in flight
  /// but the latest, so it runs at most one sum ahead of the device and a
  /// lost peer still fails a wait within the timeout, naming the rank. Read
  /// `t` on the host only after drain(). Other backends: all_reduce_sum.
  /// Returns how many earlier sums the host waited for that had not completed
  /// on the device yet (other backends: 1, this one).
  int64_t all_reduce_sum_ordered(torch::Tensor& t);
  /// Several such sums, started one after another after one wait as above:
  /// the host does not wait for one of them before starting the next.
  int64_t all_reduce_sum_ordered(std::vector<torch::Tensor>& ts);
  /// Waits (each bounded by the timeout) for every ordered sum in flight, of
  /// this group and of the groups it shares its rendezvous with (its parent,
  /// its subgroups); every other collective here does this first. Returns how
  /// many had not completed on the device yet.
  int64_t drain();
  /// The sum over ranks of host numbers (metrics, counts), in double.
  std::vector<double> all_reduce_sum(const std::vector<double>& values);
  /// The largest value over ranks.
  int64_t all_reduce_max(int64_t value);
  void barrier();

  struct Impl;

 private:
  explicit Group(std::unique_ptr<Impl> impl);
  friend class GradientSync;
  std::unique_ptr<Impl> p_;
};

struct GradientSyncOptions {
  /// Gradient bytes per bucket; a bucket is reduced as soon as backward has
  /// produced all of its gradients.
  int64_t bucket_bytes = 4 << 20;
};

/// Reduces the gradients of `params` over the group's ranks, overlapping
/// backward. Parameters are bucketed in reverse order (backward produces the
/// last layers' gradients first); buckets start in that order on every rank.
///
/// A step: arm(key) before the backward pass that completes the gradients
/// (the last micro-batch's), then finish() after it, before the optimizer.
/// A gradient may accumulate several times in one backward (batch chunks,
/// recompute), so the first step of each `key` (the input shape and offload
/// plan) counts the accumulations per parameter and reduces at finish();
/// later steps of that key start each bucket when its counts are reached.
class GradientSync {
 public:
  GradientSync(std::shared_ptr<Group> group, std::vector<torch::Tensor> params,
               GradientSyncOptions options = {});
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  void arm(const std::string& key);
  /// Waits for every bucket and writes the summed gradients back; parameters
  /// without a gradient on a rank count as zeros. Throws Error on failure.
  void finish();

  /// The same sums without backward hooks, for a step taken as CUDA graphs
  /// (TrainStep), where no collective is captured, or split across ranks:
  /// pack() copies every gradient into its bucket (zeros where a parameter
  /// has none) at the end of the first graph; reduce() all-reduces the
  /// buckets between the graphs; unpack() writes the sums back into the
  /// gradients in the second. With NCCL reduce() orders the sums on the
  /// current stream (Group::all_reduce_sum_ordered), so that the host goes on
  /// queueing the unpack and the update behind them; drain() then waits for
  /// them, bounded (a lost peer shows within the timeout), and must come
  /// before the host reads a gradient or anything made from one. Other
  /// backends: reduce() waits for the sums itself.
  void pack();
  void reduce();
  void unpack();
  void drain();

  /// The backward hooks on (the default) or off. Off, they leave each
  /// parameter's AccumulateGrad node, so that the next forward makes it on its
  /// own stream: a step captured as CUDA graphs on a side stream must not keep
  /// nodes made on another (TrainStep turns them off under graphs). On again,
  /// they are made on the current stream.
  void set_hooks(bool on);

  int64_t buckets() const;
  /// Buckets of the last step that started during backward (not in finish()).
  int64_t overlapped_last_step() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> p_;
};

}  // namespace fno::dist
