// run_generator (gen_common.h): the one batch loop of every generator.
#include "gen_common.h"

#include <c10/util/Exception.h>

#include <utility>

namespace fno::data::gen {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// What a run's progress counts, in samples: the set's kept samples of all of
/// them; a worker's (hooks.workers > 1), its own batches' samples made of those
/// it makes (the batches other workers keep meanwhile are not seen).
class GenProgress {
 public:
  /// Before the run's first batch; `batch` as next_batch's.
  GenProgress(const GenOutput& output, const GenHooks& hooks, int64_t total, int64_t batch) {
    if (hooks.workers <= 1) {
      of_ = total;
      return;
    }
    base_ = output.kept();
    for (int64_t start = output.next_batch(0, batch); start < total;) {
      const int64_t end = output.batch_end(start, batch);
      of_ += end - start;
      start = output.next_batch(end, batch);
    }
  }
  /// The samples done when the output keeps `kept` (GenOutput::kept()), and
  /// of how many.
  int64_t done(int64_t kept) const { return kept - base_; }
  int64_t of() const { return of_; }

 private:
  int64_t base_ = 0;  // a worker: the samples kept before it started
  int64_t of_ = 0;
};

}  // namespace

GenSummary run_generator(const GenSpec& spec, const GenHooks& hooks,
                         std::chrono::steady_clock::time_point t0) {
  const int64_t total = spec.run.samples;
  const int64_t batch_size = spec.run.batch;
  GenOutput output(spec.paths, total, spec.run.test_samples, spec.datasets,
                   resume_of(hooks, spec.out, resume_settings(spec.run, spec.own)),
                   spec.chunk_rows);
  if (hooks.resume && hooks.resumed) hooks.resumed(output.kept(), total);

  GenSummary summary;
  summary.device = spec.device.str();
  summary.batch = batch_size;
  const GenProgress progress(output, hooks, total, batch_size);
  const int64_t units = spec.units_per_sample;
  int64_t reported = -1;  // the units last reported (a batch may report its own)
  const auto report = [&](int64_t done) {
    if (!hooks.progress || done == reported) return;
    reported = done;
    hooks.progress(done, progress.of() * units);
  };
  for (int64_t start = output.next_batch(0, batch_size); start < total;) {
    output.check_stop(hooks, start);  // before each batch
    const int64_t b = output.batch_end(start, batch_size) - start;
    const int64_t done_before = progress.done(output.kept());
    BatchContext ctx;
    ctx.check_stop = [&](int64_t done) { output.check_stop(hooks, done); };
    ctx.progress = [&](int64_t in_batch) { report(done_before * units + in_batch); };
    ctx.write_rows = [&](size_t d, int64_t sample, int64_t row, const torch::Tensor& rows) {
      output.write_rows(d, sample, row, rows);
    };
    GenBatch made = spec.make_batch(start, b, ctx);
    if (spec.chunk_rows > 0) {
      output.mark_written(start, b, made.stats);
    } else {
      output.write(start, made.data, made.stats);
    }
    report(progress.done(output.kept()) * units);
    start = output.next_batch(start + b, batch_size);
  }
  // A worker (hooks.workers > 1), or a run that left samples to others, ends
  // here: its batches are kept and no file is written.
  if (hooks.workers > 1 || !output.complete()) {
    summary.written = false;
    summary.kept = output.kept();
    summary.samples = total;
    summary.seconds = seconds_since(t0);
    return summary;
  }
  output.check_stop(hooks, total);  // before the files appear
  output.commit([&](size_t p) { return spec.attributes(output, p); });
  if (spec.summarize) spec.summarize(output, summary);
  summary.files = spec.paths;
  summary.samples = total;
  summary.seconds = seconds_since(t0);
  return summary;
}

}  // namespace fno::data::gen
