// Internal to train/: the progress display of fno_train (rank 0's, on stderr).
#pragma once

#include <fno_train/config.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

namespace fno {
namespace detail {

// "7s", "1m07s", "2h03m".
inline std::string duration_text(double seconds) {
  const auto t = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  if (t < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", t);
  } else if (t < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", t / 60, t % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", t / 3600, t / 60 % 60);
  }
  return buf;
}

// Progress on stderr, rank 0's. Within an epoch: on a terminal (output.progress
// auto or bar) a bar redrawn as batches finish, with samples/s and the epoch's
// time left; off a terminal (auto, plain) a line every output.progress_every
// seconds once an epoch has run half of that (short epochs print none). After
// each epoch one line (bar, plain). fno_predict shows its samples or tiles the
// same way (show(), with quiet_for: no bar for a short run). The times are the
// host's: with a GPU's queue ahead of it, the first readings run early.
struct ProgressDisplay {
  using Clock = std::chrono::steady_clock;
  bool bar = false;
  bool plain = false;
  double plain_every = 10;                  // seconds between plain lines
  static constexpr double kBarEvery = 0.1;  // the bar's redraws at most this often
  double quiet_for = 0;  // no bar before this many seconds (short runs show none)

  ProgressDisplay(Progress progress, double every, bool main) : plain_every(every) {
    const bool tty = ::isatty(STDERR_FILENO) == 1;
    bar = main && (progress == Progress::kBar || (progress == Progress::kAuto && tty));
    plain = main && (progress == Progress::kPlain || (progress == Progress::kAuto && !tty));
  }
  // Ends the bar's line before a message of its own.
  void break_line() const {
    if (bar) std::fprintf(stderr, "\n");
  }
  // An epoch starts (or goes on after a resume) with `done` of its samples done.
  void start_epoch(int64_t done) {
    t0_ = Clock::now();
    last_ = t0_;
    done0_ = done;
    plain_lines_ = 0;
  }
  // `done` of `total` batches finished, `samples` of `total_samples` (all ranks).
  void batch(int64_t epoch, int64_t epochs, size_t done, size_t total, int64_t samples,
             int64_t total_samples) {
    show("epoch " + std::to_string(epoch) + "/" + std::to_string(epochs), "batch",
         static_cast<int64_t>(done), static_cast<int64_t>(total), samples, total_samples,
         "samples");
  }
  // `done` of `total` steps ("<head> [###  ] done/total" on the bar, "<head>:
  // <noun> done/total (p%)" as a plain line) and `units` of `total_units` of
  // work, whose rate and the time left they tell ("<rate> <unit>/s").
  void show(const std::string& head, const char* noun, int64_t done, int64_t total, int64_t units,
            int64_t total_units, const char* unit) {
    if (!bar && !plain) return;
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - t0_).count();
    const double since = std::chrono::duration<double>(now - last_).count();
    const double rate = elapsed > 0 ? static_cast<double>(units - done0_) / elapsed : 0.0;
    const double left = rate > 0 ? static_cast<double>(total_units - units) / rate : 0.0;
    char speed[96] = "";
    if (elapsed >= 0.5 && rate > 0) {
      std::snprintf(speed, sizeof(speed), "  %.0f %s/s  %s left", rate, unit,
                    duration_text(left).c_str());
    }
    const long long d = done, t = std::max<int64_t>(total, 1);
    if (bar) {
      if (elapsed < quiet_for) return;
      if (since < kBarEvery && done != total) return;
      last_ = now;
      drawn_ = true;
      const int width = 30;
      const int filled = static_cast<int>(width * std::min(d, t) / t);
      std::fprintf(stderr, "\r\033[K%s [%s%s] %lld/%lld%s", head.c_str(),
                   std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(), d,
                   static_cast<long long>(total), speed);
      std::fflush(stderr);
      return;
    }
    if (elapsed < plain_every / 2 || done == total) return;
    if (plain_lines_ > 0 && since < plain_every) return;
    last_ = now;
    ++plain_lines_;
    std::fprintf(stderr, "%s: %s %lld/%lld (%.0f%%), %.0f %s/s, %s left\n", head.c_str(), noun, d,
                 static_cast<long long>(total),
                 100.0 * static_cast<double>(d) / static_cast<double>(t), rate, unit,
                 duration_text(left).c_str());
    std::fflush(stderr);
  }
  // Clears the bar's line if it was drawn (a run other than training's ends).
  void clear() {
    if (bar && drawn_) std::fprintf(stderr, "\r\033[K");
    if (bar && drawn_) std::fflush(stderr);
    drawn_ = false;
  }
  bool shows() const { return bar || plain; }
  void epoch_line(const std::string& line) const {
    if (bar) std::fprintf(stderr, "\r\033[K");
    if (bar || plain) std::fprintf(stderr, "%s\n", line.c_str());
  }

 private:
  Clock::time_point t0_, last_;
  int64_t done0_ = 0;
  int plain_lines_ = 0;
  bool drawn_ = false;
};

}  // namespace detail
}  // namespace fno
