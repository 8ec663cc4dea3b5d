// fno_predict: applies a trained FNO (a fno_train run directory) to new inputs,
// at any grid, and writes the predictions as HDF5 (docs/predict.md).
//
// Exit codes: 0 done; 2 bad command line (an --out that exists, a bad value);
// 3 bad model, input or output file, or a failed read or write (one line
// naming it; no output is left).
#include <fno_offload/planner.h>
#include <fno_train/config.h>
#include <fno_train/predict.h>

#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <string>

#include "cli.h"

namespace {

const fno::cli::Fail fail("fno_predict");

// "FIRST:COUNT" or "FIRST:" (to the end); std::invalid_argument naming the text.
void parse_samples(const std::string& text, int64_t& first, int64_t& count) {
  const auto colon = text.find(':');
  auto number = [&](const std::string& s) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (s.empty() || used != s.size() || v < 0) {
      throw std::invalid_argument("expected FIRST:COUNT or FIRST: (whole numbers), got '" + text +
                                  "'");
    }
    return static_cast<int64_t>(v);
  };
  if (colon == std::string::npos) number("");
  first = number(text.substr(0, colon));
  const std::string rest = text.substr(colon + 1);
  count = rest.empty() ? -1 : number(rest);
  if (count == 0) throw std::invalid_argument("COUNT must be >= 1, got '" + text + "'");
}

}  // namespace

int main(int argc, char** argv) {
  // A write over the file-size limit (ulimit -f) fails with EFBIG, said in one
  // line with the output's temporary file removed, instead of killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{
      "Applies a trained FNO (a fno_train run directory, or a state dict and its model's\n"
      "settings) to the inputs of one or several data files, at any grid, and writes the\n"
      "decoded predictions to an HDF5 file (dataset 'pred'; given the truth, per-sample\n"
      "relative errors 'l2' and 'h1' and OUT.summary.json)."};
  fno::PredictOptions o;
  std::string samples, gpu_memory_limit, host_memory_limit;
  app.add_option("--model", o.run_dir,
                 "the training run's directory (config.yaml, model.pt); with --model-config or "
                 "--set, a state dict file (e.g. neuraloperator's FNO.state_dict())")
      ->required();
  app.add_option("--model-config", o.model_config,
                 "the model's settings for a state dict --model: a YAML file in fno_train's keys "
                 "(its model: section); no normalizers apply");
  app.add_option("--set", o.model_settings,
                 "a setting of a state dict --model's model by its config key, as fno_train's "
                 "--set, e.g. --set model.n_modes=[16,16] --set model.hidden_channels=32 "
                 "(repeatable; over --model-config's, or alone)");
  app.add_option("--checkpoint", o.checkpoint,
                 "weights to use instead of RUN_DIR/model.pt (a checkpoint_*.pt or a state dict)");
  app.add_option("--input", o.inputs,
                 "the inputs: a .pt or HDF5 (.h5, .mat v7.3) file; repeat it (or name several "
                 "files after it) for their samples in order as one set; for a run trained on "
                 "benchmark data, the benchmark's file or folder, as data.train_file")
      ->required();
  app.add_option("--x-key", o.x_key,
                 "the input array's name (default: the run's data.x_key; x in .pt, coeff in HDF5)");
  app.add_option("--y-key", o.y_key,
                 "the truth's name (y in .pt, sol in HDF5); given, the errors are computed; "
                 "without it no truth is read");
  app.add_option("--samples", samples,
                 "FIRST:COUNT, or FIRST: for the rest, of the inputs' samples in order "
                 "(default: all)");
  app.add_option("--out", o.out, "the output HDF5 file; never overwritten without --overwrite")
      ->required();
  app.add_flag("--overwrite", o.overwrite, "replace an existing --out (and its summary)");
  app.add_option("--batch-size", o.batch_size,
                 "samples per forward batch (default: the run's first test set's)")
      ->transform(fno::cli::positive_integer<int64_t>());
  app.add_option("--gpu-memory-limit", gpu_memory_limit,
                 "GPU memory the forward may take, e.g. 8GiB (micro-batches or tiles)");
  app.add_option("--host-memory-limit", host_memory_limit,
                 "host memory the run's data may take, e.g. 24GiB (HDF5 inputs, and their truth, "
                 "are streamed tile by tile when their arrays do not fit)");
  app.add_option("--precision", o.precision, "fp32, tf32, bf16 or fp16 (default: the run's)");
  app.add_option("--device", o.device, "auto, cpu, cuda or cuda:N")->default_val("auto");
  app.add_option("--tile-rows", o.tile_rows,
                 "run in tiles of this many rows of the first spatial dim (default: the plan's)")
      ->transform(fno::cli::positive_integer<int64_t>());
  app.add_option("--cuda-graphs", o.cuda_graphs,
                 "auto (on a GPU, a micro-batch shape whose whole-grid forward takes at most "
                 "20 ms is captured as a CUDA graph after its warm-up and replayed), on (every "
                 "shape seen twice) or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->default_val("auto");
  app.add_option("--progress", o.progress,
                 "auto (a bar on a terminal, plain lines when piped), bar, plain or none; short "
                 "runs show none")
      ->check(CLI::IsMember({"auto", "bar", "plain", "none"}))
      ->default_val("auto");
  app.add_option("--split", o.split,
                 "a run trained on benchmark data (data.format): the split of --input (a file "
                 "or the data set's folder) to read (default: the run's first test set's, else "
                 "test)");
  app.add_flag("--rollout", o.rollout,
               "a run trained on benchmark data: also roll each trajectory out from its first "
               "data.history steps (dataset 'rollout', rollout metrics in the summary)");
  app.add_option("--domain-parallel", o.domain_parallel,
                 "under torchrun: the ranks that share each sample, each reading, predicting "
                 "and writing its band of rows (it divides the world size; the groups of them "
                 "split the samples)")
      ->transform(fno::cli::positive_integer<int64_t>());
  app.add_option("--timeout", o.timeout_s,
                 "under torchrun: seconds a rank waits for the others (the rendezvous, each "
                 "collective) before it stops with an error naming the rank")
      ->check(fno::cli::positive_number())
      ->default_val(300);
  app.add_option("--progress-every", o.progress_every, "seconds between plain progress lines")
      ->check(fno::cli::non_negative_number())
      ->default_val(10);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(2, std::string(e.what()) + " (see --help)");
  }
  // One input file is PredictOptions::input; several, PredictOptions::inputs.
  if (o.inputs.size() == 1) {
    o.input = o.inputs.front();
    o.inputs.clear();
  }
  try {
    if (!samples.empty()) parse_samples(samples, o.first, o.count);
  } catch (const std::invalid_argument& e) {
    return fail(2, std::string("--samples: ") + e.what());
  }
  if (!gpu_memory_limit.empty()) {
    try {
      o.gpu_memory_limit = fno::offload::parse_bytes(gpu_memory_limit);
    } catch (const std::invalid_argument& e) {
      return fail(2, std::string("--gpu-memory-limit: ") + e.what());
    }
  }
  if (!host_memory_limit.empty()) {
    try {
      o.host_memory_limit = fno::offload::parse_bytes(host_memory_limit);
    } catch (const std::invalid_argument& e) {
      return fail(2, std::string("--host-memory-limit: ") + e.what());
    }
  }
  if (!o.precision.empty()) {
    try {
      fno::parse_precision(o.precision);
    } catch (const std::invalid_argument& e) {
      return fail(2, std::string("--precision: ") + e.what());
    }
  }
  try {
    const auto r = fno::predict(o);
    if (!r.main) return fno::cli::flushed(fail);  // (rank 0 tells)
    std::fprintf(stderr, "fno_predict: plan: %s\n", r.plan.c_str());
    if (!r.l2.empty()) std::printf("mean_l2 %.6f\nmean_h1 %.6f\n", r.mean_l2, r.mean_h1);
    for (const auto& [name, v] : r.metrics) std::printf("%s %.6f\n", name.c_str(), v);
    if (r.read_s + r.write_s > 0) {  // streamed: where the time went
      std::fprintf(stderr,
                   "fno_predict: forward %.2f s; beside it, input read %.2f s (waited %.2f s), "
                   "output written %.2f s (waited %.2f s)\n",
                   r.forward_wall_s, r.read_s, r.read_wait_s, r.write_s, r.write_wait_s);
    }
    if (r.gpu_peak_bytes > 0) {
      std::printf("gpu_peak_bytes %lld\n", static_cast<long long>(r.gpu_peak_bytes));
    }
    if (!r.forward_seconds.empty()) {
      std::printf("forward_seconds");
      for (const double t : r.forward_seconds) std::printf(" %.6f", t);
      std::printf("\n");
    }
    std::printf("wrote %s\n", r.out.c_str());
    if (!r.summary.empty()) std::printf("wrote %s\n", r.summary.c_str());
    return fno::cli::flushed(fail);
  } catch (const fno::PredictUsageError& e) {
    return fail(2, e.what());
  } catch (const fno::ConfigError& e) {
    return fail(3, e.what());
  } catch (const c10::Error& e) {
    return fail(3, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(3, e.what());
  }
}
