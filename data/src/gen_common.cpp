// The generators' shared pieces (gen_common.h).
#include "gen_common.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

namespace fno::data::gen {
const char* signal_name(int sig) {
  return sig == 2 ? "SIGINT" : sig == 15 ? "SIGTERM" : "a signal";
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

StandardNormals::StandardNormals(uint64_t seed, int64_t index)
    : engine_(splitmix64(splitmix64(seed) + static_cast<uint64_t>(index))) {}

namespace {

/// Box-Muller of two draws: the pair's first (cos) and second (sin) numbers.
inline void box_muller(uint64_t a, uint64_t b, double& first, double& second) {
  constexpr double kTwo53 = 9007199254740992.0;
  const double u1 = static_cast<double>(a >> 11) / kTwo53;  // [0, 1)
  const double u2 = static_cast<double>(b >> 11) / kTwo53;
  const double radius = std::sqrt(-2.0 * std::log(1.0 - u1));
  second = radius * std::sin(2.0 * kPi * u2);
  first = radius * std::cos(2.0 * kPi * u2);
}

}  // namespace

double StandardNormals::operator()() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  const uint64_t a = engine_();
  const uint64_t b = engine_();
  double first = 0;
  box_muller(a, b, first, spare_);
  have_spare_ = true;
  return first;
}

void StandardNormals::fill(double* out, int64_t n) {
  int64_t i = 0;
  if (n > 0 && have_spare_) {
    out[i++] = spare_;
    have_spare_ = false;
  }
  constexpr int64_t kPairs = int64_t{1} << 20;  // pairs a chunk: 16 MiB of draws
  std::vector<uint64_t> draws;
  while (n - i >= 2) {
    const int64_t pairs = std::min(kPairs, (n - i) / 2);
    draws.resize(static_cast<size_t>(2 * pairs));
    for (auto& d : draws) d = engine_();
    double* o = out + i;
    at::parallel_for(0, pairs, 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        box_muller(draws[static_cast<size_t>(2 * p)], draws[static_cast<size_t>(2 * p + 1)],
                   o[2 * p], o[2 * p + 1]);
      }
    });
    i += 2 * pairs;
  }
  if (i < n) out[i] = (*this)();  // an odd count: the last pair's second number is the spare
}

std::string format_number(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

Attribute text_attr(const std::string& name, const std::string& text) {
  Attribute a;
  a.name = name;
  a.text = text;
  return a;
}

Attribute number_attr(const std::string& name, double v) {
  Attribute a;
  a.name = name;
  a.number = v;
  a.is_number = true;
  return a;
}

torch::Device resolve_device(const std::string& name) {
  if (name == "auto") {
    return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0)
                                       : torch::Device(torch::kCPU);
  }
  torch::Device d(torch::kCPU);
  try {
    d = torch::Device(name);
  } catch (const c10::Error&) {
    TORCH_CHECK_VALUE(false, "device '", name, "' is not one of auto, cpu, cuda, cuda:N");
  }
  TORCH_CHECK_VALUE(d.is_cuda() || (d.is_cpu() && (!d.has_index() || d.index() == 0)), "device '",
                    name, "' is not one of auto, cpu, cuda, cuda:N");
  if (d.is_cpu()) return torch::Device(torch::kCPU);
  if (d.is_cuda()) {
    TORCH_CHECK_VALUE(torch::cuda::is_available(), "device '", name,
                      "': CUDA is not available on this machine");
    const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
    TORCH_CHECK_VALUE(!d.has_index() || d.index() < count, "device '", name, "': this machine has ",
                      count, " CUDA device(s)");
    if (!d.has_index()) d = torch::Device(torch::kCUDA, 0);
  }
  return d;
}

std::vector<std::string> output_paths(const std::string& out, int64_t test_samples) {
  if (test_samples == 0) return {out};
  const size_t slash = out.rfind('/');
  const size_t dot = out.rfind('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string stem = has_ext ? out.substr(0, dot) : out;
  const std::string ext = has_ext ? out.substr(dot) : ".h5";
  return {stem + "_train" + ext, stem + "_test" + ext};
}

void check_output_paths(const std::string& out, const std::vector<std::string>& paths) {
  TORCH_CHECK_VALUE(!out.empty(), "out: no output file given");
  for (const auto& path : paths) {
    std::error_code ec;  // refused here, not by the rename after all the work
    TORCH_CHECK_VALUE(!std::filesystem::is_directory(path, ec), "out: '", path, "' is a directory");
    // Nothing is written over: not a set made before, not a file of another program.
    TORCH_CHECK_VALUE(!std::filesystem::exists(std::filesystem::symlink_status(path, ec)), "out: '",
                      path, "' exists; fno_datagen writes over no file: move it away or choose ",
                      "another --out");
  }
}

void check_sample_counts(int64_t samples, int64_t test_samples) {
  TORCH_CHECK_VALUE(samples >= 1, "samples must be >= 1, got ", samples);
  TORCH_CHECK_VALUE(samples <= kMaxSamples, "samples must be <= ", kMaxSamples, ", got ", samples);
  TORCH_CHECK_VALUE(test_samples >= 0 && test_samples < samples,
                    "test_samples must be in [0, samples - 1] = [0, ", samples - 1, "], got ",
                    test_samples);
}

void check_batch_out_device(int64_t batch_size, const std::string& out,
                            const std::vector<std::string>& paths, const std::string& device) {
  TORCH_CHECK_VALUE(batch_size >= 0, "batch_size must be >= 0 (0: automatic), got ", batch_size);
  // (batch ends, start + batch, stay far inside 64 bits)
  TORCH_CHECK_VALUE(batch_size <= kMaxSamples, "batch_size must be <= ", kMaxSamples, ", got ",
                    batch_size);
  check_output_paths(out, paths);
  resolve_device(device);
}

std::vector<Attribute> grid_attrs(int64_t resolution, int64_t subsample, int64_t stored) {
  return {number_attr("resolution", static_cast<double>(resolution)),
          number_attr("subsample", static_cast<double>(subsample)),
          number_attr("stored_resolution", static_cast<double>(stored))};
}

std::vector<Attribute> seed_attrs(uint64_t seed) {
  return {number_attr("seed", static_cast<double>(seed)),
          text_attr("seed_text", std::to_string(seed))};
}

std::vector<Attribute> split_attrs(const std::string& split, int64_t count, int64_t first,
                                   int64_t total) {
  return {text_attr("split", split), number_attr("samples", static_cast<double>(count)),
          number_attr("first_sample", static_cast<double>(first)),
          number_attr("total_samples", static_cast<double>(total))};
}

void append(std::vector<Attribute>& attrs, const std::vector<Attribute>& more) {
  attrs.insert(attrs.end(), more.begin(), more.end());
}

void check_stop(const GenHooks& hooks, int64_t done, int64_t total) {
  if (!hooks.stop_requested) return;
  if (const int sig = hooks.stop_requested()) {
    throw DatagenInterrupted(sig, std::string("stopped by ") + signal_name(sig) + " after " +
                                      std::to_string(done) + " of " + std::to_string(total) +
                                      " samples; no output written");
  }
}

Resume resume_of(const GenHooks& hooks, const std::string& out,
                 std::vector<std::pair<std::string, std::string>> settings) {
  Resume r;
  if (!hooks.resume) return r;
  r.dir = datagen_partial_dir(out);
  r.settings = std::move(settings);
  r.stop_after = hooks.stop_after_samples;
  r.worker = hooks.worker;
  r.workers = hooks.workers;
  return r;
}

std::vector<std::pair<std::string, std::string>> resume_settings(
    const RunSettings& run, const std::vector<std::pair<std::string, std::string>>& own) {
  std::vector<std::pair<std::string, std::string>> s{
      {"problem", run.problem},
      {"generator_version", std::to_string(run.version)},
      {"resolution", std::to_string(run.resolution)},
      {"samples", std::to_string(run.samples)},
      {"test_samples", std::to_string(run.test_samples)},
      {"seed", std::to_string(run.seed)},
      {"subsample", std::to_string(run.subsample)}};
  s.insert(s.end(), own.begin(), own.end());
  s.emplace_back("device", run.cuda ? "cuda" : "cpu");
  s.emplace_back("batch", run.cuda ? std::to_string(run.batch) : "any");
  return s;
}

torch::Tensor every_kth(const torch::Tensor& x, int64_t k, int64_t dims) {
  if (k == 1) return x;
  auto y = x;
  for (int64_t d = 1; d <= dims; ++d) y = y.slice(d, 0, y.size(d), k);
  return y;
}

}  // namespace fno::data::gen

namespace fno::data {

std::string datagen_partial_dir(const std::string& out) { return out + ".partial"; }

}  // namespace fno::data
