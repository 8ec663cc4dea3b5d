// fno_bench: the FNO training step over resolutions, batch sizes and offload
// policies; ms/step, peak GPU memory, bytes moved and bandwidth as JSON and CSV.
// With --cap it emulates a smaller GPU, and --find-largest searches the largest
// square grid each policy trains under that cap by running it. The model is the
// seed FNO, or the model section of a training config (--config, --set).
// Under torchrun (one rank per GPU) each row also reports the samples/s of all
// ranks and the scaling efficiency against one GPU measured in the same run:
//   torchrun --no-python --nproc-per-node 2 build/apps/fno_bench --resolutions 1024
//
// Exit codes: 0 done; 2 bad command line or config; 3 unwritable output; 4 the
// benchmark failed; 5 several processes: a rank died or hung.
#include <fno/precision.h>
#include <fno_offload/planner.h>
#include <fno_train/bench.h>
#include <fno_train/config.h>
#include <fno_train/distributed.h>

#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "cli_error.h"

namespace {

const fno::cli::Fail fail("fno_bench");

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Benchmarks the FNO training step (forward, H1 loss, backward, AdamW) under offload "
      "policies."};
  fno::BenchOptions o;
  std::string cap, budget, json_path, csv_path, config_path;
  std::vector<std::string> overrides;
  bool dry_run = false;
  app.add_option("--config", config_path,
                 "benchmark the model of this training config (its model section, read as "
                 "fno_train reads it; default: the seed model)");
  app.add_option("--set", overrides,
                 "override a config value, e.g. --set model.hidden_channels=64 (repeatable; "
                 "needs --config)");
  app.add_flag("--dry-run", dry_run,
               "build the model, print its parameter count and the resolved settings, and exit "
               "(needs no GPU)");
  app.add_option("--resolutions", o.resolutions,
                 "grid sizes N (N x N for a 2D model, N x N x N for a 3D one, N x N x T with "
                 "--time-length)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  int64_t time_length = -1;
  app.add_option("--time-length", time_length,
                 "a 3D model's last axis T: grids N x N x T (a space-time Navier-Stokes model; "
                 "default: its config's data.t_out, else N; 0: N)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batches", o.batches, "batch sizes")->delimiter(',')->check(CLI::PositiveNumber);
  std::vector<std::string> policies;
  app.add_option("--policies", policies,
                 "offload policies: none, slim, all, blocks:K, recompute, recompute+offload, auto")
      ->delimiter(',');
  app.add_option("--warmup", o.warmup, "untimed steps per configuration")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--steps", o.steps, "timed steps per configuration (median reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--chunks", o.offload.chunks, "batch chunks per stage for the fixed policies")
      ->check(CLI::PositiveNumber);
  app.add_option("--micro-batches", o.offload.micro_batches,
                 "run each step as this many micro-batches for the fixed policies")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--gpu-memory-limit", budget, "budget for auto, e.g. 8GiB (default: free memory)");
  app.add_option("--cap", cap,
                 "cap the allocator at this much memory (emulates a smaller GPU), e.g. 16GiB");
  app.add_flag("--find-largest", o.find_largest,
               "search the largest square grid each policy trains under --cap");
  app.add_option("--grid-step", o.grid_step, "granularity of that search")
      ->check(CLI::PositiveNumber);
  app.add_option("--grid-max", o.grid_max, "upper end of that search")->check(CLI::PositiveNumber);
  app.add_option("--prefetch-depth", o.offload.prefetch_depth,
                 "stages prefetched ahead in backward")
      ->check(CLI::NonNegativeNumber);
  std::string inflight_mib = "auto";
  app.add_option("--max-inflight-mib", inflight_mib,
                 "device-to-host MiB in flight before forward waits (back-pressure), or auto: "
                 "1024, grown after steps whose forward waited (the fixed policies)");
  app.add_option("--min-bytes", o.offload.min_bytes, "saved tensors smaller than this stay")
      ->check(CLI::NonNegativeNumber);
  std::string compress = "none";
  app.add_option("--compress", compress,
                 "host storage of offloaded float32 activations: none (lossless) or bf16");
  app.add_option(
      "--plan-cache", o.offload.plan_cache,
      "auto reuses (and keeps) its plans in this directory (default: search every time)");
  app.add_option("--timeline-dir", o.timeline_dir,
                 "write one step's memory timeline per configuration here");
  app.add_option("--trace", o.trace_path,
                 "write a Chrome trace of one step of the first configuration here");
  std::vector<std::string> precisions;
  app.add_option("--precision", precisions,
                 "compute precisions, each row in each: fp32, tf32, bf16, fp16 (default: fp32, or "
                 "the config's training.precision)")
      ->delimiter(',');
  std::string cuda_graphs;
  app.add_option("--cuda-graphs", cuda_graphs,
                 "each step as one CUDA graph per shape: auto (where graphs work: offload policy "
                 "none, one micro-batch, one rank), on (the same, saying why when they cannot) or "
                 "off (default: auto, or the config's training.cuda_graphs)");
  app.add_option("--json", json_path, "write the results as JSON here");
  app.add_option("--csv", csv_path, "write the results as CSV here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(2, std::string(e.what()) + " (see --help)");
  }
  try {
    if (app.count("--policies") > 0) {
      o.policies.clear();
      for (const auto& p : policies) o.policies.push_back(fno::offload::parse_policy(p));
    }
    o.offload.compress = fno::offload::parse_compress(compress);
    try {
      o.offload.max_inflight_mib = fno::parse_inflight_mib(inflight_mib);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--max-inflight-mib: ") + e.what());
    }
    if (!cap.empty()) o.memory_cap = fno::offload::parse_bytes(cap);
    if (!budget.empty()) o.offload.gpu_memory_limit = fno::offload::parse_bytes(budget);
  } catch (const std::invalid_argument& e) {
    return fail(2, e.what());
  }
  if (!overrides.empty() && config_path.empty()) return fail(2, "--set needs --config FILE");
  try {
    if (!config_path.empty()) fno::use_config(o, config_path, overrides);
    if (time_length >= 0) o.time_length = time_length;
    if (!precisions.empty()) {
      o.precisions.clear();
      for (const auto& p : precisions) o.precisions.push_back(fno::parse_precision(p));
    }
  } catch (const fno::ConfigError& e) {
    return fail(2, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(2, std::string("--precision: ") + e.what());
  }
  if (o.time_length > 0 && o.model.n_modes().size() != 3) {
    return fail(2, "--time-length " + std::to_string(o.time_length) + " needs a 3D model (" +
                       std::to_string(o.model.n_modes().size()) + "D here)");
  }
  try {
    if (!cuda_graphs.empty()) o.cuda_graphs = fno::parse_cuda_graphs(cuda_graphs);
  } catch (const std::invalid_argument& e) {
    return fail(2, std::string("--cuda-graphs: ") + e.what());
  }
  if (dry_run) {
    try {
      std::cout << fno::describe_bench(o);
      return 0;
    } catch (const c10::Error& e) {
      return fail(2, e.what_without_backtrace());
    } catch (const std::exception& e) {
      return fail(2, e.what());
    }
  }
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  try {
    const auto result = fno::run_bench(o);
    if (result.rank != 0) return 0;  // rank 0 reports
    const auto json = result.to_json(command);
    std::cout << json;
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      if (!(f << json)) return fail(3, json_path + ": cannot write");
    }
    if (!csv_path.empty()) {
      std::ofstream f(csv_path);
      if (!(f << result.to_csv())) return fail(3, csv_path + ": cannot write");
    }
    return 0;
  } catch (const fno::dist::Error& e) {
    fail(5, e.what());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(5);  // the process group's teardown could wait on a dead peer
  } catch (const c10::Error& e) {
    return fail(4, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(4, e.what());
  }
}
