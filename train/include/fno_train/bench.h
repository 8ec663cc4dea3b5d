// The training-step benchmark behind fno_bench: an FNO's step (forward, H1
// loss, backward, AdamW) over resolutions x batch sizes x offload policies,
// and, under a memory cap, the largest square grid each policy trains. The
// model is the seed FNO, or the model section of a training config.
#pragma once

#include <fno/fno.h>
#include <fno/precision.h>
#include <fno_engine/graphed_step.h>
#include <fno_offload/planner.h>
#include <fno_train/config.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fno {

/// The seed FNO, neuraloperator's Darcy example: modes 16x16, hidden 32, 1,192,801 parameters.
FNOOptions seed_model();

/// The policies fno_bench compares by default: none, all, recompute+offload, auto.
std::vector<offload::Policy> default_bench_policies();

struct BenchOptions {
  /// --resolutions: grid sizes N (N x N for a 2D model, N x N x N for a 3D one
  /// unless time_length is set).
  std::vector<int64_t> resolutions{256, 512, 1024};
  /// --time-length: a 3D model's last axis (time, for a space-time Navier-Stokes
  /// model): grids N x N x T; 0: N x N x N. use_config sets it to a space-time
  /// config's data.t_out.
  int64_t time_length = 0;
  /// --batches: batch sizes.
  std::vector<int64_t> batches{8};
  /// --policies: the offload policy of each row (the offload section's policy is unused).
  std::vector<offload::Policy> policies = default_bench_policies();
  /// --precision: the compute precision of each row (fno/precision.h).
  std::vector<Precision> precisions{Precision::kFP32};
  /// --warmup: untimed steps per configuration (plans, pinned pool).
  int64_t warmup = 2;
  /// --steps: timed steps per configuration; the median is reported.
  int64_t steps = 5;
  /// The offload settings of every row, as the config's offload section holds
  /// them, from the flags --chunks, --micro-batches, --gpu-memory-limit,
  /// --min-bytes, --prefetch-depth, --max-inflight-mib, --compress and
  /// --plan-cache. plan_cache names a directory here ('': no cache, every row
  /// searches); host_memory_limit and max_prefetch_mib keep their defaults.
  OffloadConfig offload;
  /// --cap: the allocator's cap in bytes (emulates a smaller GPU); 0: none.
  int64_t memory_cap = 0;
  /// --find-largest: search the largest grid per policy (needs a cap).
  bool find_largest = false;
  /// --grid-step: the search's granularity.
  int64_t grid_step = 64;
  /// --grid-max: the search's upper end.
  int64_t grid_max = 4096;
  /// The benchmarked FNO; use_config() sets it.
  FNOOptions model = seed_model();
  /// Where the model came from (describe_bench).
  std::string model_source = "the seed model";
  /// --timeline-dir: write one step's memory timeline per row here.
  std::string timeline_dir;
  /// --trace: a Chrome trace (CPU ops and CUDA kernels) of one step of the first row.
  std::string trace_path;
  /// Under torchrun: how long a rank waits for the others.
  double dist_timeout_s = 300;
  /// --cuda-graphs (or the config's training.cuda_graphs): each row's steps as
  /// CUDA graphs where they work (fno_engine/graphed_step.h); a row that cannot
  /// take them runs eagerly, with one line per reason.
  CudaGraphs cuda_graphs = CudaGraphs::kAuto;
  /// --domain-parallel N (under torchrun): each sample's rows split over N
  /// ranks (fno_train/domain.h), the rest data parallel. The rows run the
  /// tiled step of each rank's band, eagerly, under auto's measured plan: the
  /// fastest estimated tiled plans of rank 0's band, those that fit every
  /// rank's own budget trial-stepped by all ranks together, the fastest by the
  /// slowest rank's time taken by all (fno_engine/collective_search.h; the
  /// row's plan names each candidate's time); the policies are not used.
  int64_t domain_parallel = 1;
  /// --one-gpu-baseline (with --domain-parallel): rank 0 first times one
  /// GPU's step on the whole sample (policy auto, its fastest plan within the
  /// budget) while the other ranks wait.
  bool domain_baseline = true;
};

struct BenchRow {
  std::string policy;
  std::string precision = "fp32";
  int64_t resolution = 0, batch = 0;
  int64_t time_length = 0;  // a 3D model's last axis when not resolution (0: it is)
  std::string status;       // "ok" | "oom" | "over budget: ..." | "error: ..."
  double ms_per_step = 0;
  int64_t peak_allocated = 0, peak_reserved = 0;
  // Per step (means over the timed steps); bytes over the link.
  int64_t bytes_offloaded = 0, bytes_prefetched = 0, bytes_on_demand = 0;
  int64_t bytes_reused_on_device = 0;  // offloaded, yet used from the GPU copy
  double d2h_gbps = 0, h2d_gbps = 0, forward_wait_ms = 0, backward_wait_ms = 0;
  double d2h_busy_ms = 0, h2d_busy_ms = 0;  // time each copy direction was busy
  int64_t inflight_window = 0;  // the back-pressure window of the last timed step (bytes)
  double forward_stall_ms = 0;  // GPU idle while forward's host thread waited on back-pressure
  double link_overlap_ms = 0;   // both copy directions busy at once
  double link_floor_ms = 0;     // the link's least time for the step's bytes (StepStats)
  std::string plan;
  int64_t estimated_peak = 0;
  double plan_seconds = 0;   // auto's plan search (the first step of the row; domain: the trials)
  bool cuda_graphs = false;  // the timed steps replayed CUDA graphs
  // Under torchrun (N = world_size ranks, one GPU each, batch per rank):
  // ms_per_step is the slowest rank's median with the gradient all-reduce;
  // ms_per_step_one_gpu is rank 0's alone, without it, in the same run;
  // scaling_efficiency = one GPU / N ranks step time (N x that is the speed-up).
  int64_t world_size = 1;
  double samples_per_s = 0;
  double ms_per_step_one_gpu = 0;
  double scaling_efficiency = 0;
  // --domain-parallel N: ranks per sample; each rank's median (ms_per_step is
  // the slowest); what one GPU's baseline row ended with ("" when not run);
  // speed-up = the ranks' samples/s over one GPU's; per step and rank, the
  // bytes its band's all-reduces carry (payload: the spectra, forward and
  // backward, and the loss's sums and halo rows), of which the spectra are
  // spectra_bytes, and the bytes a ring all-reduce sends for them and for the
  // gradients (2 (n - 1) / n of the payload).
  int64_t domain_parallel = 1;
  std::vector<double> rank_ms;
  std::string one_gpu_status;
  double speedup = 0;
  int64_t domain_payload_bytes = 0, spectra_bytes = 0, domain_bytes_sent = 0;
  int64_t gradient_bytes_sent = 0;
  // Per step and rank: the band's sums, and the times the host waited for
  // one the device had not finished (fno_train/domain.h's BandTraffic).
  double domain_sums = 0, domain_host_waits = 0;
  // --domain-parallel: the loss of every step, warm-up steps first (the
  // optimizer steps after each, on the same batch: a finite loss that
  // decreases shows the ranks train).
  std::vector<double> losses;
};

/// A row's grid as text: "256^2", "256^3", or "256^2 x 40" with a time length.
std::string grid_text(const BenchRow& row, size_t dims);

struct BenchResult {
  std::string device;
  size_t grid_dims = 2;  // the model's spatial dims
  int64_t device_bytes = 0;
  int64_t memory_cap = 0;
  int64_t world_size = 1, rank = 0;  // under torchrun; rank 0 reports
  std::vector<BenchRow> rows;
  std::vector<std::pair<std::string, int64_t>> largest;  // policy -> largest grid (0: none)
  std::string to_json(const std::string& command) const;
  std::string to_csv() const;
};

/// Checks what can be checked before the device: --find-largest's --cap, its
/// grid search (--grid-step within --grid-max, one process), and that every
/// grid's activations count within 2^53 elements. Throws std::invalid_argument
/// naming the options. run_bench checks the same first.
void check_bench_options(const BenchOptions& options);

/// Runs the sweep on the current CUDA device; progress lines go to stderr.
BenchResult run_bench(const BenchOptions& options);

/// Takes the model from the `model` section of a training config, read by
/// fno_train's parser (load_config, with `overrides` "section.key=value"): a bad
/// config throws the same one-line ConfigError as fno_train gets. A Navier-Stokes
/// config's model is benchmarked as any other on the bench's grids (a recurrent
/// one: one step of its rollout, which model_source says); a space-time one on
/// N x N x t_out (time_length), when its data.t_out is given.
void use_config(BenchOptions& options, const std::string& config_path,
                const std::vector<std::string>& overrides = {});

/// fno_bench --dry-run: the model (built on the CPU), its parameter count
/// ("n_params N") and the resolved settings, one per line; needs no CUDA.
std::string describe_bench(const BenchOptions& options);

}  // namespace fno
