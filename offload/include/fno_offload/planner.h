// The planner: from measured per-stage activation sizes, transient peaks,
// compute times and copy bandwidth, the peak GPU memory and step time of a
// plan, and the plan that fits a memory budget in the least time.
//
// Policies (config `offload.policy`, `fno_train --offload POLICY`):
//   none               every stage kKeep
//   slim               every stage kSlim (recompute the cheap activations, keep the rest)
//   all                every stage kOffload (every saved activation, asynchronously)
//   blocks:K           the first K stages (lifting counts as the first) kOffload
//   recompute          every stage kRecompute (checkpointing)
//   recompute+offload  every stage kRecomputeOffload
//   auto               plan_for_budget(): per-stage levels and chunks under a budget
#pragma once

#include <fno_offload/offload.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fno::offload {

struct Policy {
  enum class Kind { kNone, kAll, kBlocks, kRecompute, kRecomputeOffload, kSlim, kAuto };
  Kind kind = Kind::kNone;
  int64_t blocks = 0;         // K of blocks:K
  std::string text = "none";  // its name, for messages (as given, or to_string's)
  /// The policy of `kind` (and K for kBlocks), named by its canonical text.
  static Policy of(Kind kind, int64_t blocks = 0);
  bool is(Kind k) const { return kind == k; }
};

/// Parses a policy name; throws std::invalid_argument naming the text. The
/// only place a policy's text is read: everything else compares kinds.
Policy parse_policy(const std::string& text);
/// The canonical name: "none", "blocks:3", "recompute+offload", ...
std::string to_string(Policy::Kind kind, int64_t blocks = 0);
/// "16GiB", "8 GB", "512MiB", "1.5e9", "123" (bytes); throws std::invalid_argument naming the text.
int64_t parse_bytes(const std::string& text);
/// 17179869184 -> "16.00 GiB".
std::string format_bytes(int64_t bytes);

/// A fixed policy's plan for these stages (`chunks` for the chunkable ones). Not kAuto.
Plan plan_for_policy(const Policy& policy, const std::vector<Stage>& stages, int64_t chunks = 1);

/// The inverse of Plan::to_string for these stages ("lifting=recompute/2, block.0=keep, ...");
/// throws std::invalid_argument naming what does not fit.
Plan parse_plan(const std::string& text, const std::vector<Stage>& stages);

/// No plan keeps the step within the memory budget: `auto` refuses to run one
/// that does not (the message names the smallest peak it reached, and how).
class BudgetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One stage, measured with every stage kKeep (see measure_profile).
struct StageProfile {
  std::string name;
  bool chunkable = false;
  int64_t input_bytes = 0;         // the stage input
  int64_t output_bytes = 0;        // the stage output
  int64_t saved_bytes = 0;         // offloadable saved activations (distinct storages)
  int64_t forward_transient = 0;   // forward peak above the allocation at its start
  int64_t backward_transient = 0;  // backward peak above the allocation at its start
  double forward_ms = 0;
  double backward_ms = 0;
  /// The same, running Stage::fn_slim (set when the stage has one).
  bool has_slim = false;
  int64_t saved_bytes_slim = 0;
  int64_t forward_transient_slim = 0;
  int64_t backward_transient_slim = 0;
  double forward_ms_slim = 0;
  double backward_ms_slim = 0;
};

struct Profile {
  std::vector<StageProfile> stages;
  int64_t batch = 1;       // the batch the numbers are for
  int64_t base_bytes = 0;  // held outside the stages: parameters, optimizer state, data
  int64_t grad_bytes = 0;  // parameter gradients, made in backward
  double d2h_gbps = 50;    // copy bandwidth assumed for estimates
  double h2d_gbps = 50;
  /// The same profile for another batch size (activations and times scale linearly).
  Profile scaled_to_batch(int64_t batch) const;
  /// Activations, transients and times times `factor` (a grid `factor` times
  /// larger); the batch, base and gradient bytes stay.
  Profile scaled(double factor) const;
  /// A table: one row per stage, sizes in MiB, times in ms.
  std::string table() const;
};

/// One step with every stage kKeep on `x`, measuring each stage (CUDA only:
/// needs the caching allocator's statistics). `loss` maps the output to a scalar.
Profile measure_profile(const std::vector<Stage>& stages, const at::Tensor& x,
                        const std::function<at::Tensor(const at::Tensor&)>& loss,
                        const std::vector<at::Tensor>& parameters);

struct Estimate {
  int64_t peak_bytes = 0;
  double step_ms = 0;
  std::string peak_at;  // "forward block.2", "backward projection", ...
  int64_t offloaded_bytes = 0;
};

/// The peak memory and step time `plan` would have.
Estimate estimate(const Profile& profile, const Plan& plan, const OffloadOptions& options);

/// The plan of least estimated step time whose estimated peak is within `budget`
/// bytes. When none fits, the plan of least peak, with `fits` false. With
/// `micro_batches`, plans may also split the step into micro-batches (for a
/// caller whose loss adds over batch entries).
Plan plan_for_budget(const Profile& profile, int64_t budget, const OffloadOptions& options,
                     Estimate* estimate_out = nullptr, bool* fits = nullptr,
                     bool micro_batches = false);

/// Up to `count` plans with distinct per-stage levels (each with its best chunk
/// counts), estimated peak within `budget * slack`, fastest estimate first: the
/// candidates that auto then measures, since the estimate is only a model.
std::vector<std::pair<Plan, Estimate>> rank_plans(const Profile& profile, int64_t budget,
                                                  const OffloadOptions& options, size_t count,
                                                  double slack = 1.2, bool micro_batches = false);

/// The estimate of a plan with micro_batches > 1 is k times that of one
/// micro-batch (the profile scaled to it), its peak that micro-batch's plus the
/// rest of the input.

/// A fixed policy at a batch-chunk count, and its estimate.
struct PolicyChoice {
  Policy policy;
  int64_t chunks = 1;
  Estimate estimate;
};

/// What would fit a step that ran out of `capacity` bytes, as data (the
/// programs word it in their own flags).
struct MemoryAdvice {
  int64_t capacity = 0;
  /// The estimate of the policy that ran (a fixed one; not for auto).
  bool has_current = false;
  Estimate current;
  /// The fastest fixed policy and batch-chunk count estimated to fit within
  /// 90% of the capacity (a tenth of headroom: the estimate is a model).
  bool fits = false;
  PolicyChoice fastest;
  /// The least memory among them (when none fits).
  PolicyChoice least;
};
MemoryAdvice out_of_memory_advice(const Profile& profile, const Policy& current, int64_t capacity,
                                  const OffloadOptions& options);

/// The budget `auto` uses when none is given: the current CUDA device's free
/// memory plus what the caching allocator holds unused; 0 without CUDA.
int64_t device_free_bytes();
/// Caps the caching allocator of the current CUDA device at `bytes` (through its
/// memory fraction), to emulate a smaller GPU; returns the fraction set.
double cap_device_memory(int64_t bytes);
/// Total memory of the current CUDA device; 0 without CUDA.
int64_t device_total_bytes();

}  // namespace fno::offload
