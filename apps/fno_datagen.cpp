// fno_datagen: generates PDE data into HDF5 files that fno_train reads
// directly: Darcy flow as in the FNO paper (Li et al. 2020, appendix A.3.2;
// --problem darcy, the default; fno_data/darcy_gen.h describes the problem, the
// scheme and the solver), or the periodic 3D Poisson problem for 3D models
// (--problem poisson3d; fno_data/poisson3d_gen.h).
//
// Exit codes: 0 done; 2 bad command line; 3 the run failed (output not
// writable, solver failure); 130/143 stopped by SIGINT/SIGTERM. A run that
// stops for any reason leaves no output file (temporary file + fsync + rename).
#include <fno_data/darcy_gen.h>
#include <fno_data/poisson3d_gen.h>

#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "cli_error.h"

namespace {

const fno::cli::Fail fail("fno_datagen");

/// A CLI11 transform for an integer option of type T: plain decimal digits (a
/// leading '-' only for signed T) within T's range, leading zeros dropped.
/// CLI11's own conversion (strtoull/strtoll with base 0) would read "010" as
/// octal 8, "0x10" as 16, wrap "-1" to 2^64 - 1 for an unsigned option and
/// saturate out-of-range values, so two different seeds could give one file.
template <typename T>
CLI::Validator decimal_integer() {
  static_assert(std::is_integral_v<T>);
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool negative = std::is_signed_v<T> && !text.empty() && text[0] == '-';
        std::string digits = negative ? text.substr(1) : text;
        const std::string refused =
            "'" + text + "' is not a decimal integer" +
            (std::is_signed_v<T>
                 ? " (" + std::to_string(8 * sizeof(T)) + "-bit)"
                 : " in [0, " + std::to_string(std::numeric_limits<T>::max()) + "]");
        if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) {
          return refused;
        }
        digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
        const std::string normal = negative ? "-" + digits : digits;
        T value{};
        const auto [end, ec] = std::from_chars(normal.data(), normal.data() + normal.size(), value);
        if (ec != std::errc() || end != normal.data() + normal.size()) return refused;
        text = normal;
        return std::string();
      },
      "");
}

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;  // the run polls the flag; no write (progress, HDF5) sees EINTR
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

/// The command line, each argument quoted when it holds a space or quote.
std::string command_line(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i > 0) out += ' ';
    if (!arg.empty() && arg.find_first_of(" \t'\"\\$") == std::string::npos) {
      out += arg;
      continue;
    }
    out += '\'';
    for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

/// A progress bar on a terminal (one line redrawn), plain lines every 10%
/// otherwise, or nothing; `header` comes first, once the first batch is done
/// (so that a run refused at the start prints one line only).
class Progress {
 public:
  Progress(const std::string& mode, std::string header) : header_(std::move(header)) {
    const bool tty = ::isatty(STDERR_FILENO) == 1;
    bar_ = mode == "bar" || (mode == "auto" && tty);
    plain_ = mode == "plain" || (mode == "auto" && !tty);
  }
  void update(int64_t done, int64_t total) {
    if (!header_.empty() && (bar_ || plain_))
      std::fprintf(stderr, "fno_datagen: %s\n", header_.c_str());
    header_.clear();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const double eta =
        done > 0 ? secs * static_cast<double>(total - done) / static_cast<double>(done) : 0;
    const int pct = static_cast<int>(100 * done / total);
    if (bar_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(kWidth * done / total);
      std::string bar(static_cast<size_t>(filled), '#');
      bar.append(static_cast<size_t>(kWidth - filled), '.');
      std::fprintf(stderr, "\r[%s] %lld/%lld %3d%%  %.0fs  eta %.0fs ", bar.c_str(),
                   static_cast<long long>(done), static_cast<long long>(total), pct, secs, eta);
      if (done == total) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    } else if (plain_ && (pct >= next_pct_ || done == total)) {
      std::fprintf(stderr, "fno_datagen: %lld/%lld samples (%d%%), %.1fs\n",
                   static_cast<long long>(done), static_cast<long long>(total), pct, secs);
      next_pct_ = pct / 10 * 10 + 10;
    }
  }
  void abandon() {
    if (bar_ && header_.empty()) std::fprintf(stderr, "\n");
  }

 private:
  std::string header_;
  bool bar_ = false;
  bool plain_ = false;
  int next_pct_ = 10;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Generates PDE data into HDF5 datasets coeff and sol, float32, that fno_train reads "
      "directly.\n"
      "--problem darcy (default): Darcy flow as in the FNO paper (Li et al. 2020, appendix "
      "A.3.2):\n"
      "-div(a grad u) = 1 on the unit square, u = 0 on the boundary, a = 12 or 3 by the sign\n"
      "of a Gaussian random field with covariance 9 (-Laplacian + 9)^-2 (zero Neumann), solved\n"
      "by second-order finite differences on the R x R node grid (boundary included); (N, R', "
      "R').\n"
      "--problem poisson3d: -Laplace(u) = f on the periodic unit cube, f a zero-mean Gaussian\n"
      "random field with covariance 9 (-Laplacian + 9)^-2.5, u its exact spectral solution, on\n"
      "the R x R x R grid x_i = i/R; coeff = f, sol = u, (N, R', R', R')."};
  fno::data::DarcyGenOptions o;
  int64_t resolution = 0, samples = 0, test_samples = 0, subsample = 1, batch = 0;
  uint64_t seed = 0;
  double tolerance = o.tolerance();
  std::string problem = "darcy", out, device = "auto", progress = "auto";
  app.add_option("--problem", problem, "darcy (default) or poisson3d")
      ->check(CLI::IsMember({"darcy", "poisson3d"}));
  app.add_option("--resolution", resolution,
                 "grid points per side: darcy, nodes of the solve, boundary included (>= 3); "
                 "poisson3d, points of the periodic grid (>= 4)")
      ->required()
      ->transform(decimal_integer<int64_t>());
  app.add_option("--samples", samples, "number of samples in all")
      ->required()
      ->transform(decimal_integer<int64_t>());
  app.add_option("--seed", seed, "seed; sample i depends only on (seed, i)")
      ->required()
      ->transform(decimal_integer<uint64_t>());
  app.add_option("--out", out,
                 "output file (.h5); with --test-samples, STEM_train.h5 and STEM_test.h5")
      ->required();
  app.add_option("--test-samples", test_samples,
                 "put the last N samples into STEM_test.h5, the others into STEM_train.h5 "
                 "(default 0: one file)")
      ->transform(decimal_integer<int64_t>());
  app.add_option("--subsample", subsample,
                 "store every k-th node per side; darcy: k must divide resolution - 1 "
                 "(421 with k = 5, 3, 2 gives 85, 141, 211); poisson3d: k must divide resolution")
      ->transform(decimal_integer<int64_t>());
  app.add_option("--batch", batch,
                 "samples solved together (default 1 on the CPU; on CUDA 32 for darcy, "
                 "2^24 / R^3 within [1, 32] for poisson3d); the data do not depend on it")
      ->transform(decimal_integer<int64_t>());
  app.add_option("--device", device, "auto (CUDA when available), cpu, cuda or cuda:N");
  app.add_option("--tolerance", tolerance,
                 "darcy: relative residual at which CG stops (default 1e-10)");
  app.add_option("--progress", progress, "auto (a bar on a terminal, else lines), bar, plain, none")
      ->check(CLI::IsMember({"auto", "bar", "plain", "none"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(2, std::string(e.what()) + " (see --help)");
  }

  const bool poisson3d = problem == "poisson3d";
  if (poisson3d && app.count("--tolerance") > 0) {
    return fail(2, "--tolerance applies to --problem darcy only (poisson3d is solved exactly)");
  }
  o.resolution(resolution)
      .samples(samples)
      .seed(seed)
      .test_samples(test_samples)
      .subsample(subsample)
      .tolerance(tolerance)
      .batch_size(batch)
      .device(device)
      .out(out)
      .command_line(command_line(argc, argv));
  fno::data::Poisson3dGenOptions o3;
  o3.resolution(resolution)
      .samples(samples)
      .seed(seed)
      .test_samples(test_samples)
      .subsample(subsample)
      .batch_size(batch)
      .device(device)
      .out(out)
      .command_line(o.command_line());
  try {
    if (poisson3d) {
      fno::data::validate_poisson3d_options(o3);
    } else {
      fno::data::validate_darcy_options(o);
    }
  } catch (const c10::Error& e) {
    return fail(2, e.what_without_backtrace());
  }
  // "12 samples at 16x16x16 (stored 8x8x8), seed 0 -> FILES"
  const auto grid = [&](int64_t r) {
    std::string text = std::to_string(r) + "x" + std::to_string(r);
    return poisson3d ? text + "x" + std::to_string(r) : text;
  };
  std::string header = std::to_string(samples) + " samples at " + grid(resolution);
  if (subsample > 1) {
    header += " (stored " +
              grid(poisson3d ? resolution / subsample : (resolution - 1) / subsample + 1) + ")";
  }
  header += ", seed " + std::to_string(seed) + " ->";
  const auto paths =
      poisson3d ? fno::data::poisson3d_output_paths(o3) : fno::data::darcy_output_paths(o);
  for (const auto& p : paths) header += " " + p;
  Progress bar(progress, header);
  install_stop_handlers();
  fno::data::DarcyGenHooks hooks;
  hooks.progress = [&](int64_t done, int64_t total) { bar.update(done, total); };
  hooks.stop_requested = [] { return static_cast<int>(g_stop_signal); };
  try {
    const auto summary =
        poisson3d ? fno::data::generate_poisson3d(o3, hooks) : fno::data::generate_darcy(o, hooks);
    std::printf("device %s\n", summary.device.c_str());
    std::printf("samples %lld\n", static_cast<long long>(summary.samples));
    std::printf("seconds %.2f\n", summary.seconds);
    std::printf("max_residual %.3g\n", summary.max_residual);
    if (!poisson3d) {
      std::printf("cg_iterations mean %.1f max %lld\n", summary.mean_iterations,
                  static_cast<long long>(summary.max_iterations));
    }
    for (const auto& f : summary.files) std::printf("wrote %s\n", f.c_str());
    return 0;
  } catch (const fno::data::DatagenInterrupted& e) {
    bar.abandon();
    return fail(128 + e.signal(), e.what());
  } catch (const c10::ValueError& e) {
    bar.abandon();
    return fail(2, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    bar.abandon();
    return fail(3, e.what_without_backtrace());
  } catch (const std::exception& e) {
    bar.abandon();
    return fail(3, e.what());
  }
}
