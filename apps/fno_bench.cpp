// fno_bench: the FNO training step over resolutions, batch sizes and offload
// policies; ms/step, peak GPU memory, bytes moved and bandwidth as JSON and CSV.
// With --cap it emulates a smaller GPU, and --find-largest searches the largest
// square grid each policy trains under that cap by running it. The model is the
// seed FNO, or the model section of a training config (--config, --set).
// Under torchrun (one rank per GPU) each row also reports the samples/s of all
// ranks and the scaling efficiency against one GPU measured in the same run:
//   torchrun --no-python --nproc-per-node 2 build/apps/fno_bench --resolutions 1024
// With --domain-parallel N, N ranks share each sample, a band of rows each:
//   torchrun --no-python --nproc-per-node 4 build/apps/fno_bench --domain-parallel 4 \
//       --resolutions 8192 --batches 1
//
// It writes only the files it is asked for (--json, --csv, --trace, the
// timelines in --timeline-dir, auto's plans in --plan-cache), each atomically,
// and checks where they go before any work.
//
// Exit codes: 0 done; 2 bad command line or config; 3 unwritable output (stdout
// included); 4 the benchmark failed; 5 several processes: a rank died or hung.
#include <fno/precision.h>
#include <fno/serialize.h>
#include <fno_offload/planner.h>
#include <fno_train/bench.h>
#include <fno_train/config.h>
#include <fno_train/distributed.h>

#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"

namespace {

const fno::cli::Fail fail("fno_bench");

using fno::cli::flushed;
using fno::cli::integer_in;
using fno::cli::non_negative_integer;
using fno::cli::positive_integer;

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
      ->transform(positive_integer<int64_t>());
  int64_t time_length = -1;
  app.add_option("--time-length", time_length,
                 "a 3D model's last axis T: grids N x N x T (a space-time Navier-Stokes model; "
                 "default: its config's data.t_out, else N; 0: N)")
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--batches", o.batches, "batch sizes")
      ->delimiter(',')
      ->transform(positive_integer<int64_t>());
  std::vector<std::string> policies;
  app.add_option("--policies", policies,
                 "offload policies: none, slim, all, blocks:K, recompute, recompute+offload, auto")
      ->delimiter(',');
  app.add_option("--warmup", o.warmup, "untimed steps per configuration")
      ->transform(non_negative_integer<int64_t>());
  app.add_option("--steps", o.steps, "timed steps per configuration (median reported)")
      ->transform(positive_integer<int64_t>());
  app.add_option("--chunks", o.offload.chunks, "batch chunks per stage for the fixed policies")
      ->transform(positive_integer<int64_t>());
  app.add_option("--micro-batches", o.offload.micro_batches,
                 "run each step as this many micro-batches for the fixed policies")
      ->transform(integer_in<int64_t>(1, int64_t{1} << 20));
  app.add_option("--gpu-memory-limit", budget, "budget for auto, e.g. 8GiB (default: free memory)");
  app.add_option("--cap", cap,
                 "cap the allocator at this much memory (emulates a smaller GPU), e.g. 16GiB");
  app.add_flag("--find-largest", o.find_largest,
               "search the largest square grid each policy trains under --cap");
  app.add_option("--grid-step", o.grid_step, "granularity of that search")
      ->transform(positive_integer<int64_t>());
  app.add_option("--grid-max", o.grid_max, "upper end of that search")
      ->transform(positive_integer<int64_t>());
  app.add_option("--prefetch-depth", o.offload.prefetch_depth,
                 "stages prefetched ahead in backward")
      ->transform(non_negative_integer<int64_t>());
  std::string inflight_mib = "auto";
  app.add_option("--max-inflight-mib", inflight_mib,
                 "device-to-host MiB in flight before forward waits (back-pressure), or auto: "
                 "1024, grown after steps whose forward waited (the fixed policies)");
  app.add_option("--min-bytes", o.offload.min_bytes, "saved tensors smaller than this stay")
      ->transform(non_negative_integer<int64_t>());
  std::string compress = "none";
  app.add_option("--compress", compress,
                 "host storage of offloaded float32 activations: none (lossless) or bf16");
  app.add_option(
      "--plan-cache", o.offload.plan_cache,
      "auto reuses (and keeps) its plans in this directory (default: search every time)");
  std::string search_seconds;
  app.add_option("--search-seconds", search_seconds,
                 "seconds auto's measured plan search may take (--domain-parallel: the bands' "
                 "search, rank 0's clock): then it takes the fastest plan measured, none: the "
                 "fastest estimated to fit, and the row's plan says the search was cut; 0: no "
                 "trial step, 1e9: no cap in effect (default: 60)");
  app.add_option("--timeline-dir", o.timeline_dir,
                 "write one step's memory timeline per configuration here");
  app.add_option("--trace", o.trace_path,
                 "write a Chrome trace of one step of the first configuration here (under torchrun: rank 0's)");
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
  app.add_option("--domain-parallel", o.domain_parallel,
                 "under torchrun: each sample's rows split over this many ranks (the rest data "
                 "parallel; it divides the world size), each rank's band in the tiled step under "
                 "a plan measured on all ranks together (the candidates' times in the row's "
                 "plan); rows report every rank's step time and the bytes it sends")
      ->transform(positive_integer<int64_t>());
  app.add_option("--one-gpu-baseline", o.domain_baseline,
                 "with --domain-parallel: rank 0 first times one GPU's step on the whole sample "
                 "(policy auto) while the others wait (default: 1)");
  app.add_option("--json", json_path, "write the results as JSON here");
  app.add_option("--csv", csv_path, "write the results as CSV here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return flushed(fail, app.exit(e));
  } catch (const CLI::ParseError& e) {
    return fail(2, std::string(e.what()) + " (see --help)");
  }
  // Each value's own parse, its error prefixed with the option.
  const auto parsed = [](const char* option, const auto& parse) {
    try {
      parse();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string(option) + ": " + e.what());
    }
  };
  try {
    parsed("--policies", [&] {
      if (app.count("--policies") == 0) return;
      o.policies.clear();
      for (const auto& p : policies) o.policies.push_back(fno::offload::parse_policy(p));
    });
    parsed("--compress", [&] { o.offload.compress = fno::offload::parse_compress(compress); });
    parsed("--max-inflight-mib",
           [&] { o.offload.max_inflight_mib = fno::parse_inflight_mib(inflight_mib); });
    parsed("--cap", [&] {
      if (!cap.empty()) o.memory_cap = fno::offload::parse_bytes(cap);
    });
    parsed("--search-seconds", [&] {
      if (search_seconds.empty()) return;
      size_t used = 0;
      double v = -1;
      try {
        v = std::stod(search_seconds, &used);
      } catch (const std::exception&) {
      }
      if (used != search_seconds.size() || !std::isfinite(v) || v < 0) {
        throw std::invalid_argument("expected a number of seconds >= 0, got '" + search_seconds +
                                    "'");
      }
      o.offload.search_seconds = v;
    });
    parsed("--gpu-memory-limit", [&] {
      if (!budget.empty()) o.offload.gpu_memory_limit = fno::offload::parse_bytes(budget);
    });
  } catch (const std::invalid_argument& e) {
    return fail(2, e.what());
  }
  // Options that act only with another, and where the outputs go: refused
  // before any work (and by --dry-run).
  if (app.count("--one-gpu-baseline") > 0 && o.domain_parallel == 1) {
    return fail(2, "--one-gpu-baseline applies to --domain-parallel only");
  }
  for (const char* option : {"--grid-step", "--grid-max"}) {
    if (app.count(option) > 0 && !o.find_largest) {
      return fail(2, std::string(option) + " applies to --find-largest only");
    }
  }
  const bool has_auto = std::any_of(o.policies.begin(), o.policies.end(), [](const auto& p) {
    return p.kind == fno::offload::Policy::Kind::kAuto;
  });
  if (app.count("--plan-cache") > 0 && !has_auto) {
    return fail(2, "--plan-cache keeps the auto policy's plans, which --policies leaves out");
  }
  if (app.count("--search-seconds") > 0 && !has_auto && o.domain_parallel == 1) {
    return fail(2, "--search-seconds bounds the auto policy's search, which --policies leaves out");
  }
  const std::vector<std::pair<std::string, std::string>> outputs{
      {"--json", json_path}, {"--csv", csv_path}, {"--trace", o.trace_path}};
  for (const auto& [option, path] : outputs) {
    if (path.empty()) continue;
    if (const auto why = fno::cli::unwritable_file(path); !why.empty()) {
      return fail(2, option + ": " + why);
    }
  }
  if (!o.timeline_dir.empty()) {
    if (const auto why = fno::cli::unwritable_dir(o.timeline_dir); !why.empty()) {
      return fail(2, "--timeline-dir: " + why);
    }
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
  try {
    fno::check_bench_options(o);
  } catch (const std::invalid_argument& e) {
    return fail(2, e.what());
  }
  if (dry_run) {
    try {
      std::cout << fno::describe_bench(o);
      return flushed(fail);
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
    if (result.rank != 0) return flushed(fail);  // rank 0 reports
    const auto json = result.to_json(command);
    std::cout << json;
    try {
      if (!json_path.empty()) fno::write_file_atomic(json_path, json.data(), json.size());
      if (!csv_path.empty()) {
        const auto csv = result.to_csv();
        fno::write_file_atomic(csv_path, csv.data(), csv.size());
      }
    } catch (const std::exception& e) {
      return fail(3, e.what());
    }
    return flushed(fail);
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
