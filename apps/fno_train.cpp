// fno_train: trains an FNO from a YAML config (configs/README.md documents every key).
//
// Nothing is written over: a new run (and a dry run) refuses a directory that
// holds a run (fno::run_file_in); --resume DIR writes only into DIR, after
// checking that its data files are the run's (inputs.txt); --resume --dry-run
// writes nothing.
//
// Exit codes: 0 done; 2 bad command line or config (also a directory that
// holds a run, data files that are not the resumed run's); 3 bad data or an
// unwritable output (stdout included); 4 training stopped (non-finite loss,
// unusable checkpoint); 130/143 stopped by SIGINT/SIGTERM after writing a
// checkpoint; 5 several processes (torchrun): a rank died or hung, the
// rendezvous failed, a port is in use.
#include <fno_train/config.h>
#include <fno_train/distributed.h>
#include <fno/precision.h>
#include <fno_train/trainer.h>
#include <fno_offload/planner.h>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli.h"

namespace {

const fno::cli::Fail fail("fno_train");

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

}  // namespace

using fno::cli::flushed;

int main(int argc, char** argv) {
  CLI::App app{
      "Trains a Fourier Neural Operator from a YAML config.\n"
      "Writes the resolved config, metrics.jsonl, summary.json, predictions.h5 and\n"
      "checkpoints into the run directory. Every config key: configs/README.md."};
  std::string config_path, out_dir, resume_dir;
  std::vector<std::string> overrides;
  bool dry_run = false, print_schema = false;
  app.add_option("--config", config_path, "YAML config file");
  app.add_option("--out", out_dir, "run directory (default: the config's output.dir)");
  app.add_option("--set", overrides,
                 "override a config value by its dotted path, e.g. --set training.epochs=5 "
                 "(repeatable)");
  app.add_flag("--dry-run", dry_run,
               "validate the config and the data, build the model, write summary.json "
               "(n_params) and config.yaml into a directory that holds no run; train nothing "
               "(with --resume: check the resume, write nothing)");
  app.add_option("--resume", resume_dir,
                 "continue the run in DIR from its last checkpoint, with DIR/config.yaml "
                 "(--set may extend training.epochs)");
  app.add_flag("--print-schema", print_schema, "print the config reference (Markdown) and exit");
  std::string offload_policy, gpu_memory_limit;
  app.add_option("--offload", offload_policy,
                 "offload saved activations: all (the default when given alone), none, slim, blocks:K, "
                 "recompute, recompute+offload, auto; sets offload.policy")
      ->expected(0, 1)
      ->default_str("all");
  app.add_option("--gpu-memory-limit", gpu_memory_limit,
                 "GPU memory budget for --offload auto, e.g. 16GiB (2^30 bytes each) or 16GB "
                 "(10^9 each); sets offload.gpu_memory_limit");
  std::string precision;
  app.add_option("--precision", precision,
                 "compute precision: fp32, tf32, bf16 or fp16; sets training.precision");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return flushed(fail, app.exit(e));
  } catch (const CLI::ParseError& e) {
    return fail(2, std::string(e.what()) + " (see --help)");
  }
  // The shortcut flags become --set overrides, so that config.yaml records them;
  // the config parser parses them (once, into the typed settings). Here they
  // are only checked, for an error that names the flag.
  if (app.count("--offload") > 0) {
    if (offload_policy.empty()) offload_policy = "all";
    try {
      fno::offload::parse_policy(offload_policy);
    } catch (const std::invalid_argument& e) {
      return fail(2, std::string("--offload: ") + e.what());
    }
    overrides.push_back("offload.policy=" + offload_policy);
  }
  if (!gpu_memory_limit.empty()) {
    try {
      fno::offload::parse_bytes(gpu_memory_limit);
    } catch (const std::invalid_argument& e) {
      return fail(2, std::string("--gpu-memory-limit: ") + e.what());
    }
    overrides.push_back("offload.gpu_memory_limit=" + gpu_memory_limit);
  }
  if (!precision.empty()) {
    try {
      fno::parse_precision(precision);
    } catch (const std::invalid_argument& e) {
      return fail(2, std::string("--precision: ") + e.what());
    }
    overrides.push_back("training.precision=" + precision);
  }
  if (print_schema) {
    std::cout << fno::config_schema_markdown();
    return flushed(fail);
  }
  if (!resume_dir.empty() && !config_path.empty()) {
    return fail(2, "--resume takes its config from DIR/config.yaml; drop --config");
  }
  if (resume_dir.empty() && config_path.empty()) return fail(2, "--config FILE is required (see --help)");
  if (!resume_dir.empty() && !out_dir.empty()) return fail(2, "--resume DIR is the run directory; drop --out");

  try {
    const bool resume = !resume_dir.empty();
    const std::string cfg_file = resume ? resume_dir + "/config.yaml" : config_path;
    if (resume && !exists(cfg_file)) return fail(2, resume_dir + ": not a run directory (no config.yaml)");
    fno::RunConfig cfg = fno::load_config(cfg_file, overrides);
    const std::string run_dir = resume ? resume_dir : (out_dir.empty() ? cfg.output.dir : out_dir);
    // A new run, or a dry run, writes over no run: only --resume continues one.
    if (const std::string held = resume ? "" : fno::run_file_in(run_dir); !held.empty()) {
      if (exists(run_dir + "/checkpoint_latest.pt")) {
        return fail(2, run_dir + " already holds a run; continue it with --resume " + run_dir +
                           (dry_run ? " (--dry-run checks it)" : "") + " or choose another --out");
      }
      return fail(2, run_dir + " already holds a run (" + held +
                         ") with no checkpoint to resume from; choose another --out, or move "
                         "it away");
    }
    // A resume goes on with the run's data files only: checked before anything loads.
    if (resume) fno::check_run_inputs(cfg, run_dir);
    fno::Trainer trainer(cfg, run_dir);
    std::fprintf(stderr, "fno_train: %s\n", trainer.describe().c_str());
    if (trainer.rank() == 0) {
      for (const auto& note : cfg.notes) std::fprintf(stderr, "fno_train: %s\n", note.c_str());
    }
    if (dry_run) {
      const auto estimates = trainer.dry_run(/*write=*/!resume);
      if (trainer.rank() != 0) return flushed(fail);  // rank 0 reports and writes
      std::printf("n_params %lld\n", static_cast<long long>(trainer.n_params()));
      if (!estimates.empty()) std::printf("%s", estimates.c_str());
      if (resume) {
        std::printf("wrote nothing (--resume %s --dry-run: its config and data check out)\n",
                    run_dir.c_str());
      } else {
        std::printf("wrote %s/summary.json\n", run_dir.c_str());
      }
      return flushed(fail);
    }
    if (resume) {
      const auto epoch = trainer.resume();
      const auto epochs = trainer.config().training.epochs;
      if (epoch >= epochs) {
        std::fprintf(stderr,
                     "fno_train: %s has finished its %lld epochs: nothing left to train (train "
                     "longer with --set training.epochs=N); evaluating the final model\n",
                     run_dir.c_str(), static_cast<long long>(epoch));
      } else {
        std::fprintf(stderr, "fno_train: resuming %s after epoch %lld of %lld\n", run_dir.c_str(),
                     static_cast<long long>(epoch), static_cast<long long>(epochs));
      }
    }
    const auto metrics = trainer.train();
    if (trainer.rank() != 0) return flushed(fail);  // rank 0 reports and writes
    for (const auto& [k, v] : metrics) std::printf("%s %.6f\n", k.c_str(), v);
    std::printf("wrote %s\n", run_dir.c_str());
    return flushed(fail);
  } catch (const fno::dist::Error& e) {
    // Exit at once: the process group's teardown could wait on a dead peer.
    fail(5, e.what());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(5);
  } catch (const fno::ConfigError& e) {
    return fail(2, e.what());
  } catch (const fno::Interrupted& e) {
    return fail(128 + e.signal(), e.what());
  } catch (const fno::TrainingError& e) {
    return fail(4, e.what());
  } catch (const c10::Error& e) {
    return fail(3, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(3, e.what());
  }
}
