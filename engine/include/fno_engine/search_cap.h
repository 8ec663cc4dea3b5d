// The time cap of a measured plan search (offload.search_seconds, fno_bench
// --search-seconds): auto's trial steps on one GPU (OffloadedStep) and the
// ranks' search among a band's plans (collective_search.h).
//
//   SearchCap cap(60);
//   for (each candidate) {
//     if (cap.expired()) break;                                // the cap has passed
//     if (cap.expired(expected_seconds)) { cut = true; continue; }  // would end past it
//     ... one trial ...
//   }
//   if (cut) plan_text += "; " + search_cut_note(cap.seconds(), trials);
//
// A trial that started runs to its end: no trial starts that is expected to
// end after the cap (by the caller's estimate of its length). A search cut so
// takes the fastest plan it measured; where none was measured, the plan
// estimated fastest among those estimated to fit (best_estimated). The
// ranks' search (collective_search.h) starts no trial once the cap has passed.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace fno {

/// Seconds on a monotonic clock, from any fixed point.
using SearchClock = std::function<double()>;

/// std::chrono::steady_clock's seconds: SearchCap's clock unless one is given.
double steady_seconds();

class SearchCap {
 public:
  /// `seconds`: the cap, from now (infinity: none; 0 or less: no trial
  /// starts). `clock`: where the time comes from (empty: steady_seconds).
  explicit SearchCap(double seconds = std::numeric_limits<double>::infinity(),
                     SearchClock clock = {});
  /// Whether the cap has passed, or will have `ahead` seconds from now (a
  /// trial expected to take that long): no such trial may start.
  bool expired(double ahead = 0) const;
  double seconds() const { return seconds_; }
  /// Seconds since the cap was made.
  double elapsed() const;

 private:
  double seconds_;
  SearchClock clock_;
  double start_;
};

/// The line a cut search adds to its plan: "search cut at the 60 s cap after
/// 3 trials" (the cap's seconds as given, %g).
std::string search_cut_note(double seconds, int64_t trials);

/// A plan the search may take unmeasured (a cut search that measured none).
struct EstimatedPlan {
  int64_t peak_bytes = 0;  // estimated
  double score = 0;        // estimated ms (lower is better)
  bool failed = false;     // a trial of it ran out of memory or peaked over the limit
};

/// The index of the lowest score among the plans not failed whose estimated
/// peak is at most `limit` (a tie: the earlier one); -1 when there is none.
int64_t best_estimated(const std::vector<EstimatedPlan>& plans, int64_t limit);

}  // namespace fno
