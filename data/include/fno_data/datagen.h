// fno_datagen's run, behind its command line (apps/fno_datagen.cpp parses the
// arguments into a DatagenRequest and calls run_datagen): the problem's
// options checked, the header and the progress on stderr, SIGINT and SIGTERM
// turned into a clean stop, the results on stdout, and the exit code.
//
// Exit codes: 0 done; 2 bad options (an output that exists; with --resume
// also: other settings or another --initial than the kept samples'); 3 the
// run failed (output not writable, solver failure, a Navier-Stokes run that
// blew up, damaged or foreign files where --resume keeps its samples); 4
// stopped at --stop-after-samples; 130/143 stopped by SIGINT/SIGTERM. A run
// that stops for any reason leaves no output file.
#pragma once

#include <fno_data/darcy_gen.h>
#include <fno_data/navier_stokes_gen.h>
#include <fno_data/poisson3d_gen.h>

#include <cstdint>
#include <string>

namespace fno::data {

struct DatagenRequest {
  /// "darcy", "poisson3d" or "ns": whose options below apply.
  std::string problem = "darcy";
  /// The options every problem has (GeneratorOptions), set on the problem's.
  int64_t resolution = 0, samples = 0, test_samples = 0, subsample = 1, batch_size = 0;
  uint64_t seed = 0;
  std::string device = "auto", out, command_line;
  /// The problems' own options (their common ones are overwritten by the above).
  DarcyGenOptions darcy;
  Poisson3dGenOptions poisson3d;
  NavierStokesGenOptions ns;
  /// "auto" (a bar on a terminal, else lines), "bar", "plain" or "none".
  std::string progress = "auto";
  /// GenHooks' resume, stop_after_samples, worker and workers.
  bool resume = false;
  int64_t stop_after_samples = 0;
  int worker = 0, workers = 1;
};

struct DatagenOutcome {
  int exit_code = 0;
  /// One line for stderr (without the program's name) when the run failed.
  std::string error;
};

/// The command line the files record: each argument quoted when it holds a
/// space or quote; without --resume, --stop-after-samples and --worker, which
/// do not change the data (so that a resumed run writes the same bytes as one run).
std::string datagen_command_line(int argc, const char* const* argv);

/// Runs the request: checks the problem's options, prints "fno_datagen:
/// N samples at GRID, seed S -> FILES" and the progress to stderr (once the
/// first batch is done), stops cleanly on SIGINT or SIGTERM (handlers
/// installed for the run), and prints the summary ("device ...", "samples
/// ...", "seconds ...", the problem's lines, "wrote FILE") to stdout.
DatagenOutcome run_datagen(const DatagenRequest& request);

}  // namespace fno::data
