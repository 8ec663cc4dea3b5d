// A measured choice among candidate plans by ranks that step together
// (fno_bench --domain-parallel: the tiled plans of a sample's bands, each
// rank holding one band; a band step's exchanges are collective, so every
// rank trial-steps the same candidate at the same time).
//
//   const auto c = collective_search(rank, world, texts, steps, sum);
//   if (c.chosen >= 0) use(candidates[c.chosen]);  // c.summary(): the row's plan
//
// The search, on every rank alike:
//   1. each rank says which candidates fit its own budget (steps.fits: its
//      free memory, its band); a candidate over any rank's budget is dropped
//      by every rank (the fits are summed over the ranks);
//   2. every kept candidate, in the order given, is stepped by every rank:
//      `warmup` untimed steps, then `steps` timed ones (steps.step returns a
//      step's ms); a rank's time is its median, the candidate's the slowest
//      rank's (each rank's time summed over the ranks as a one-hot vector);
//   3. the fastest candidate is chosen (a tie: the earlier one).
// A time cap (options.seconds, fno_engine/search_cap.h): before each
// candidate's steps the ranks sum rank 0's word on whether its cap has passed,
// so that all stop before the same candidate, none waiting for another; the
// rest are "not measured (search cut)". A cut search takes the fastest
// candidate measured, or, none measured, the first not measured (the list
// comes fastest estimated first), unmeasured; its summary says so.
// A step that throws on a rank (out of memory; offload::BudgetError for a
// measured peak over the rank's budget) drops the candidate on every rank:
// after each step the ranks sum who failed and how, and all stop stepping it.
// (A failure inside a step's exchanges leaves the other ranks waiting there
// until the group's timeout, as any failed collective step does; so a
// candidate that may run out of memory part way has a probe: steps.probe,
// a rank-local try of its memory, run by every rank before the candidate's
// first step, whose failures are summed like a step's, so that all drop it
// before any exchange.)
//
// The group is a function that sums a vector over the ranks
// (dist::Group::all_reduce_sum in fno_bench; a fake one in tests): the engine
// needs no process group.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace fno {

/// The sum of `values` over the ranks, returned on every rank. Every rank
/// calls it at the same point with a vector of the same length.
using GroupSum = std::function<std::vector<double>(const std::vector<double>& values)>;

struct CollectiveSearchOptions {
  /// Untimed steps of each candidate before its timed ones (FFT plans,
  /// workspaces, the pinned pool).
  TORCH_ARG(int64_t, warmup) = 1;
  /// Timed steps of each candidate (at least 1); a rank's time is their median.
  TORCH_ARG(int64_t, steps) = 2;
  /// Seconds from the call after which no candidate's steps start (rank 0's
  /// clock decides for every rank); infinity: no cap, 0: none is stepped.
  TORCH_ARG(double, seconds) = std::numeric_limits<double>::infinity();
};

/// What the search does on this rank for candidate i (0-based).
struct CollectiveSteps {
  /// Whether candidate i fits this rank's own budget.
  std::function<bool(int64_t i)> fits;
  /// One step of candidate i on this rank, its wall ms. Collective: every
  /// rank runs it for the same i at the same time. It may throw
  /// offload::BudgetError when the step's measured peak is over this rank's
  /// budget (after the step's collectives).
  std::function<double(int64_t i)> step;
  /// Optional: before candidate i's first step, a try of its memory on this
  /// rank alone, with no collectives (a step of the same tensors without the
  /// exchanges); it throws as step does (out of memory; offload::BudgetError
  /// for a measured peak over this rank's budget). Failures are summed over
  /// the ranks, and the candidate is dropped on every rank before its first
  /// collective step.
  std::function<void(int64_t i)> probe;
  /// Optional: after candidate i's steps, stepped or failed (free its memory).
  std::function<void(int64_t i)> done;
  /// Optional: errors of a step that end the search, rethrown (the group's
  /// own, after which the ranks cannot sum); others drop the candidate.
  std::function<bool(const std::exception& e)> fatal;
  /// Optional: the clock of the cap (search_cap.h's SearchClock; empty: steady_seconds).
  std::function<double()> clock;
};

/// One candidate's outcome, the same on every rank.
struct CandidateTrial {
  std::string text;
  /// "ok", "over budget (estimated) on rank 1", "out of memory on rank 0",
  /// "over budget as measured on rank 1", "failed on ranks 0, 1", "not
  /// measured (search cut)" (the same on every rank).
  std::string status;
  /// This rank's own error's first line, when its step threw something else
  /// than out of memory ("" elsewhere: it differs between ranks).
  std::string detail;
  std::vector<double> rank_ms;  // each rank's median ms (stepped candidates)
  double ms = std::numeric_limits<double>::infinity();  // the slowest rank's
};

struct CollectiveChoice {
  /// The fastest candidate that ran on every rank (or, `estimated`, the first
  /// not measured by a cut search); -1: none.
  int64_t chosen = -1;
  std::vector<CandidateTrial> trials;  // one per candidate, in the order given
  bool cut = false;                    // the time cap stopped the search
  int64_t stepped = 0;                 // candidates whose steps started
  bool estimated = false;  // the chosen one was not measured (a cut search measured none)
  double seconds = std::numeric_limits<double>::infinity();  // the cap (options.seconds)
  /// "<chosen> (measured, the slowest rank's median: <text> 12.3 ms; <text>
  /// over budget (estimated) on rank 1[; search cut at the 60 s cap after 1
  /// trial])"; without a choice, the trials alone.
  std::string summary() const;
};

/// The search above, for candidates named by `texts` (the same list, in the
/// same order, on every rank: a list of another length on some rank throws
/// std::invalid_argument on every rank). `rank` in [0, world).
CollectiveChoice collective_search(int64_t rank, int64_t world,
                                   const std::vector<std::string>& texts,
                                   const CollectiveSteps& steps, const GroupSum& sum,
                                   const CollectiveSearchOptions& options = {});

}  // namespace fno
