// The time cap of a measured plan search (fno_engine/search_cap.h).
#include <fno_engine/search_cap.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace fno {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

SearchCap::SearchCap(double seconds, SearchClock clock)
    : seconds_(seconds), clock_(clock ? std::move(clock) : SearchClock(steady_seconds)) {
  start_ = clock_();
}

double SearchCap::elapsed() const { return clock_() - start_; }

bool SearchCap::expired(double ahead) const {
  if (std::isinf(seconds_) && seconds_ > 0) return false;
  return seconds_ <= 0 || elapsed() + std::max(0.0, ahead) >= seconds_;
}

std::string search_cut_note(double seconds, int64_t trials) {
  char cap[32];
  std::snprintf(cap, sizeof(cap), "%g", seconds);
  return "search cut at the " + std::string(cap) + " s cap after " + std::to_string(trials) +
         (trials == 1 ? " trial" : " trials");
}

int64_t best_estimated(const std::vector<EstimatedPlan>& plans, int64_t limit) {
  int64_t best = -1;
  for (size_t i = 0; i < plans.size(); ++i) {
    const auto& p = plans[i];
    if (p.failed || p.peak_bytes > limit) continue;
    if (best < 0 || p.score < plans[static_cast<size_t>(best)].score) {
      best = static_cast<int64_t>(i);
    }
  }
  return best;
}

}  // namespace fno
