// The measured choice of ranks that step together (fno_engine/collective_search.h).
#include <fno_engine/collective_search.h>

#include <fno_engine/search_cap.h>
#include <fno_offload/planner.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace fno {

namespace {

// The ranks named by a one-hot sum's non-zero entries, "rank 1" / "ranks 0, 2".
std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t k = 0; k < ranks.size(); ++k) s += (k ? ", " : "") + std::to_string(ranks[k]);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Step 1: the candidates over some rank's budget, as each one's status ("" fits everywhere).
std::vector<std::string> fit_statuses(int64_t rank, int64_t world, int64_t n,
                                      const CollectiveSteps& steps, const GroupSum& sum) {
  std::vector<double> over(static_cast<size_t>(world * n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (!steps.fits(i)) over[static_cast<size_t>(rank * n + i)] = 1.0;
  }
  const auto all = sum(over);
  std::vector<std::string> status(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> ranks;
    for (int64_t r = 0; r < world; ++r) {
      if (all.at(static_cast<size_t>(r * n + i)) > 0.5) ranks.push_back(r);
    }
    if (!ranks.empty())
      status[static_cast<size_t>(i)] = "over budget (estimated) on " + ranks_text(ranks);
  }
  return status;
}

// f() on this rank: 0 when it returned, else how it failed (1 out of memory,
// 2 over budget as measured, 3 another error; t.detail says which).
template <class F>
double failure_of(F&& f, const CollectiveSteps& steps, CandidateTrial& t) {
  try {
    f();
    return 0;
  } catch (const c10::OutOfMemoryError&) {
    return 1;
  } catch (const offload::BudgetError& e) {
    t.detail = e.what();
    return 2;
  } catch (const std::exception& e) {
    if (steps.fatal && steps.fatal(e)) throw;  // the group itself failed
    const std::string what = e.what();
    t.detail = what.substr(0, what.find('\n')).substr(0, 200);
    return 3;
  }
}

// Step 2 for one candidate: every rank probes it (steps.probe), then steps
// it; after the probe and each step the ranks sum [this step's ms, one-hot;
// how it failed, one-hot: 1 out of memory, 2 over budget as measured, 3
// another error], so that all stop together and name the same ranks.
void trial(int64_t rank, int64_t world, int64_t i, const CollectiveSteps& steps,
           const GroupSum& sum, const CollectiveSearchOptions& o, CandidateTrial& t) {
  const auto w = static_cast<size_t>(world);
  std::vector<std::vector<double>> timed(w);  // each rank's timed steps
  const int64_t warmup = std::max<int64_t>(0, o.warmup());
  const int64_t total = warmup + std::max<int64_t>(1, o.steps());
  for (int64_t k = steps.probe ? -1 : 0; k < total; ++k) {
    std::vector<double> mine(2 * w, 0.0);
    const double failed = failure_of(
        [&] {
          if (k < 0) {
            steps.probe(i);
          } else {
            mine[static_cast<size_t>(rank)] = steps.step(i);
          }
        },
        steps, t);
    mine[w + static_cast<size_t>(rank)] = failed;
    const auto all = sum(mine);
    std::vector<std::vector<int64_t>> failed_ranks(3);  // by kind
    for (int64_t r = 0; r < world; ++r) {
      const auto kind = static_cast<int64_t>(all.at(w + static_cast<size_t>(r)) + 0.5);
      if (kind >= 1 && kind <= 3) failed_ranks[static_cast<size_t>(kind - 1)].push_back(r);
    }
    static const char* kKinds[] = {"out of memory on ", "over budget as measured on ",
                                   "failed on "};
    for (size_t kind = 0; kind < 3; ++kind) {
      if (failed_ranks[kind].empty()) continue;
      t.status += (t.status.empty() ? "" : "; ") + (kKinds[kind] + ranks_text(failed_ranks[kind]));
    }
    if (!t.status.empty()) return;
    if (k < warmup) continue;  // (the probe too)
    for (size_t r = 0; r < w; ++r) timed[r].push_back(all[r]);
  }
  t.status = "ok";
  for (size_t r = 0; r < w; ++r) t.rank_ms.push_back(median(timed[r]));
  t.ms = *std::max_element(t.rank_ms.begin(), t.rank_ms.end());
}

// Whether rank 0's cap has passed, the same answer on every rank (a sum of its word).
bool cap_passed(int64_t rank, const SearchCap& cap, const GroupSum& sum) {
  return sum({rank == 0 && cap.expired() ? 1.0 : 0.0}).at(0) > 0.5;
}

constexpr const char* kNotMeasured = "not measured (search cut)";

std::string ms_text(double ms) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(ms < 10 ? 2 : 1) << ms << " ms";
  return o.str();
}

}  // namespace

std::string CollectiveChoice::summary() const {
  std::ostringstream o;
  if (chosen >= 0) o << trials[static_cast<size_t>(chosen)].text << " (";
  if (estimated) o << "estimated, not measured; ";
  o << "measured, the slowest rank's median: ";
  for (size_t i = 0; i < trials.size(); ++i) {
    const auto& t = trials[i];
    o << (i ? "; " : "") << t.text << " " << (t.status == "ok" ? ms_text(t.ms) : t.status);
  }
  if (cut) o << "; " << search_cut_note(seconds, stepped);
  if (chosen >= 0) o << ")";
  return o.str();
}

CollectiveChoice collective_search(int64_t rank, int64_t world,
                                   const std::vector<std::string>& texts,
                                   const CollectiveSteps& steps, const GroupSum& sum,
                                   const CollectiveSearchOptions& options) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw std::invalid_argument("collective_search: rank " + std::to_string(rank) +
                                " of a world of " + std::to_string(world));
  }
  if (!steps.fits || !steps.step || !sum) {
    throw std::invalid_argument("collective_search: fits, step and sum are required");
  }
  const auto n = static_cast<int64_t>(texts.size());
  // The same number of candidates on every rank, or the sums below would not match.
  const auto counts = sum({static_cast<double>(n), static_cast<double>(n) * n});
  if (counts.at(0) != static_cast<double>(n * world) ||
      counts.at(1) != static_cast<double>(n * n * world)) {
    throw std::invalid_argument(
        "collective_search: the ranks hold different numbers of candidates (" + std::to_string(n) +
        " here)");
  }
  CollectiveChoice c;
  c.seconds = options.seconds();
  const SearchCap cap(options.seconds(), steps.clock);
  const auto fit = fit_statuses(rank, world, n, steps, sum);
  for (int64_t i = 0; i < n; ++i) {
    CandidateTrial t;
    t.text = texts[static_cast<size_t>(i)];
    if (!fit[static_cast<size_t>(i)].empty()) {
      t.status = fit[static_cast<size_t>(i)];
    } else {
      // (Every rank reaches this point for the same candidates: the fits are summed.)
      if (!c.cut) c.cut = cap_passed(rank, cap, sum);
      if (c.cut) {
        t.status = kNotMeasured;
      } else {
        ++c.stepped;
        trial(rank, world, i, steps, sum, options, t);
        if (steps.done) steps.done(i);
      }
    }
    if (t.status == "ok" && (c.chosen < 0 || t.ms < c.trials[static_cast<size_t>(c.chosen)].ms)) {
      c.chosen = i;
    }
    c.trials.push_back(std::move(t));
  }
  if (c.chosen < 0 && c.cut) {
    for (int64_t i = 0; i < n && c.chosen < 0; ++i) {
      if (c.trials[static_cast<size_t>(i)].status == kNotMeasured) c.chosen = i;
    }
    c.estimated = c.chosen >= 0;
  }
  return c;
}

}  // namespace fno
