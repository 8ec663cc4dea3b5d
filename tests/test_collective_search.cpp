// The measured plan search of ranks that step together
// (fno_engine/collective_search.h, fno_bench --domain-parallel), on the CPU:
// ranks are threads, the group a fake one that sums their vectors; the steps
// are fakes that return each rank's time for a candidate. Every rank must
// reach the same choice; a candidate over one rank's budget (estimated, or as
// measured) or out of memory on one rank is dropped by every rank, and the
// ranks stop stepping it together; a time cap stops them before the same
// candidate (fno_engine/search_cap.h, whose pieces are tested here too).
#include <fno_engine/collective_search.h>
#include <fno_engine/search_cap.h>
#include <fno_offload/planner.h>
#include <fno_train/distributed.h>

#include <c10/util/Exception.h>
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <condition_variable>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "golden.h"
#include "ranks.h"

namespace {

// A group of `world` threads whose sum() returns the sum of their vectors to
// each, once all have called it; a call of another length is recorded.
class FakeGroup {
 public:
  explicit FakeGroup(int64_t world) : world_(world) {}
  std::vector<double> sum(const std::vector<double>& v) {
    std::unique_lock<std::mutex> lock(m_);
    const int64_t round = round_;
    if (arrived_ == 0) acc_.assign(v.size(), 0.0);
    if (acc_.size() != v.size()) mismatched_ = true;
    for (size_t i = 0; i < std::min(v.size(), acc_.size()); ++i) acc_[i] += v[i];
    if (++arrived_ == world_) {
      result_ = acc_;
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    return result_;
  }
  int64_t rounds() const { return round_; }
  bool mismatched() const { return mismatched_; }

 private:
  const int64_t world_;
  std::mutex m_;
  std::condition_variable cv_;
  int64_t arrived_ = 0, round_ = 0;
  bool mismatched_ = false;
  std::vector<double> acc_, result_;
};

// What one rank saw: its choice (or its error) and how often it stepped each candidate.
struct RankLog {
  fno::CollectiveChoice choice;
  std::string error;
  std::map<int64_t, int64_t> stepped, done, probed;
};

// ms[rank][i]: rank's time for candidate i; fits(rank, i); fail(rank, i, k): what the k-th
// step (0-based) of candidate i throws on rank ("" nothing, "oom", "budget", "error").
struct Fakes {
  std::vector<std::vector<double>> ms;
  std::function<bool(int64_t, int64_t)> fits = [](int64_t, int64_t) { return true; };
  std::function<std::string(int64_t, int64_t, int64_t)> fail = [](int64_t, int64_t, int64_t) {
    return std::string();
  };
  // probe(rank, i): what candidate i's probe throws on rank ("" nothing, "oom",
  // "budget"); null: no probe.
  std::function<std::string(int64_t, int64_t)> probe;
  double warmup_ms = 1000;  // the untimed step's time: it must not count
  fno::CollectiveSearchOptions options;
  // clock(rank, its log): the rank's clock in seconds (null: the steady clock).
  std::function<double(int64_t, const RankLog&)> clock;
};

std::vector<RankLog> run_ranks(const Fakes& f, const std::vector<std::string>& texts,
                               std::vector<std::vector<std::string>> per_rank_texts = {},
                               std::function<bool(const std::exception&)> fatal = nullptr) {
  const auto world = static_cast<int64_t>(f.ms.size());
  FakeGroup group(world);
  std::vector<RankLog> logs(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto& log = logs[static_cast<size_t>(r)];
      fno::CollectiveSteps steps;
      steps.fits = [&](int64_t i) { return f.fits(r, i); };
      steps.step = [&](int64_t i) {
        const int64_t k = log.stepped[i]++;
        const auto what = f.fail(r, i, k);
        if (what == "oom") TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (fake)");
        if (what == "budget") throw fno::offload::BudgetError("peaked at 9 GiB (fake)");
        if (what == "error") throw std::runtime_error("a fake failure\nsecond line");
        return k == 0 ? f.warmup_ms : f.ms[static_cast<size_t>(r)][static_cast<size_t>(i)];
      };
      steps.done = [&](int64_t i) { ++log.done[i]; };
      if (f.probe) {
        steps.probe = [&](int64_t i) {
          ++log.probed[i];
          const auto what = f.probe(r, i);
          if (what == "oom")
            TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (probe)");
          if (what == "budget") throw fno::offload::BudgetError("peaked at 9 GiB (probe)");
        };
      }
      steps.fatal = fatal;
      if (f.clock) steps.clock = [&] { return f.clock(r, log); };
      const auto& mine = per_rank_texts.empty() ? texts : per_rank_texts[static_cast<size_t>(r)];
      try {
        log.choice = fno::collective_search(
            r, world, mine, steps, [&](const std::vector<double>& v) { return group.sum(v); },
            f.options);
      } catch (const std::exception& e) {
        log.error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK_FALSE(group.mismatched());
  return logs;
}

const std::vector<std::string> kTexts{"plan A", "plan B", "plan C"};

// Every rank's choice and trials equal rank 0's.
void check_agreed(const std::vector<RankLog>& logs) {
  for (const auto& log : logs) {
    CHECK(log.error.empty());
    CHECK(log.choice.chosen == logs[0].choice.chosen);
    REQUIRE(log.choice.trials.size() == logs[0].choice.trials.size());
    for (size_t i = 0; i < log.choice.trials.size(); ++i) {
      CHECK(log.choice.trials[i].status == logs[0].choice.trials[i].status);
      CHECK(log.choice.trials[i].ms == logs[0].choice.trials[i].ms);
      CHECK(log.choice.trials[i].rank_ms == logs[0].choice.trials[i].rank_ms);
    }
    CHECK(log.choice.summary() == logs[0].choice.summary());
  }
}

}  // namespace

TEST_CASE("collective_search: the fastest by the slowest rank's median, the same on every rank") {
  Fakes f;
  f.ms = {{10, 5, 7}, {10, 9, 6}};  // slowest: 10, 9, 7
  const auto logs = run_ranks(f, kTexts);
  check_agreed(logs);
  const auto& c = logs[0].choice;
  CHECK(c.chosen == 2);
  CHECK(c.trials[1].rank_ms == std::vector<double>{5, 9});
  CHECK(c.trials[1].ms == 9);
  CHECK(c.trials[2].ms == 7);
  for (const auto& t : c.trials) CHECK(t.status == "ok");
  // Each rank stepped each candidate once untimed and twice timed, then freed it.
  for (const auto& log : logs) {
    for (int64_t i = 0; i < 3; ++i) {
      CHECK(log.stepped.at(i) == 3);
      CHECK(log.done.at(i) == 1);
    }
  }
  CHECK(c.summary() ==
        "plan C (measured, the slowest rank's median: plan A 10.0 ms; plan B 9.00 ms; plan C "
        "7.00 ms)");
  // A tie goes to the earlier candidate.
  f.ms = {{4, 4, 4}, {4, 4, 4}};
  CHECK(run_ranks(f, kTexts)[1].choice.chosen == 0);
}

TEST_CASE("collective_search: a candidate over one rank's budget is dropped by every rank") {
  Fakes f;
  f.ms = {{10, 5, 7}, {10, 9, 6}};
  f.fits = [](int64_t rank, int64_t i) { return !(rank == 1 && i == 2); };
  const auto logs = run_ranks(f, kTexts);
  check_agreed(logs);
  const auto& c = logs[0].choice;
  CHECK(c.chosen == 1);
  CHECK(c.trials[2].status == "over budget (estimated) on rank 1");
  CHECK(c.trials[2].rank_ms.empty());
  for (const auto& log : logs) {
    CHECK(log.stepped.count(2) == 0);  // never stepped, on either rank
    CHECK(log.done.count(2) == 0);
  }
  CHECK(c.summary().find("plan C over budget (estimated) on rank 1") != std::string::npos);
  // Over every budget somewhere: no choice, every rank alike.
  f.fits = [](int64_t rank, int64_t i) { return rank == i % 2; };
  const auto none = run_ranks(f, kTexts);
  check_agreed(none);
  CHECK(none[0].choice.chosen == -1);
  CHECK(none[0].choice.trials[0].status == "over budget (estimated) on rank 1");
  CHECK(none[0].choice.trials[1].status == "over budget (estimated) on rank 0");
  CHECK(none[0].choice.summary().rfind("measured, the slowest rank's median: plan A over", 0) == 0);
}

TEST_CASE("collective_search: a step that fails on one rank stops that candidate on every rank") {
  Fakes f;
  f.ms = {{10, 5, 7}, {10, 4, 6}, {10, 5, 8}};
  // Rank 1 runs out of memory in candidate B's second step; rank 2's step of
  // C peaks over its budget; rank 0's first step of A fails otherwise.
  f.fail = [](int64_t rank, int64_t i, int64_t k) {
    if (rank == 1 && i == 1 && k == 1) return std::string("oom");
    if (rank == 2 && i == 2 && k == 2) return std::string("budget");
    if (rank == 0 && i == 0 && k == 0) return std::string("error");
    return std::string();
  };
  const auto logs = run_ranks(f, kTexts);
  check_agreed(logs);
  const auto& c = logs[0].choice;
  CHECK(c.chosen == -1);
  CHECK(c.trials[0].status == "failed on rank 0");
  CHECK(c.trials[1].status == "out of memory on rank 1");
  CHECK(c.trials[2].status == "over budget as measured on rank 2");
  CHECK(logs[0].choice.trials[0].detail == "a fake failure");  // the failing rank's own line
  CHECK(logs[1].choice.trials[0].detail.empty());
  for (const auto& log : logs) {
    CHECK(log.stepped.at(0) == 1);  // all stopped after the step that failed
    CHECK(log.stepped.at(1) == 2);
    CHECK(log.stepped.at(2) == 3);
    for (int64_t i = 0; i < 3; ++i) CHECK(log.done.at(i) == 1);
  }
  // An error the caller calls fatal (the group's own) ends the search on the
  // ranks that meet it, rethrown (here every rank meets it in B's first step).
  f.fail = [](int64_t, int64_t i, int64_t) { return std::string(i == 1 ? "error" : ""); };
  const auto fatal = run_ranks(f, kTexts, {}, [](const std::exception& e) {
    return std::string(e.what()).find("a fake failure") == 0;
  });
  for (const auto& log : fatal) CHECK(log.error.rfind("a fake failure", 0) == 0);
  for (const auto& log : fatal) CHECK(log.stepped.at(1) == 1);
  // Only B fails: A and C stay, C is faster.
  f.fail = [](int64_t rank, int64_t i, int64_t k) {
    return std::string(rank == 1 && i == 1 && k == 1 ? "oom" : "");
  };
  const auto rest = run_ranks(f, kTexts);
  check_agreed(rest);
  CHECK(rest[0].choice.chosen == 2);
  CHECK(rest[0].choice.trials[2].ms == 8);
}

TEST_CASE("collective_search: a probe that fails on one rank drops the candidate before any step") {
  // (A whole band's step that runs out of memory part way would leave the
  // other ranks in its exchanges: its rank-local probe fails first.)
  Fakes f;
  f.ms = {{10, 5, 7}, {10, 4, 6}};
  f.probe = [](int64_t rank, int64_t i) {
    if (rank == 1 && i == 1) return std::string("oom");
    if (rank == 0 && i == 2) return std::string("budget");
    return std::string();
  };
  const auto logs = run_ranks(f, kTexts);
  check_agreed(logs);
  const auto& c = logs[0].choice;
  CHECK(c.chosen == 0);
  CHECK(c.trials[0].status == "ok");
  CHECK(c.trials[0].ms == 10);  // the probe is not timed
  CHECK(c.trials[1].status == "out of memory on rank 1");
  CHECK(c.trials[2].status == "over budget as measured on rank 0");
  CHECK(logs[0].choice.trials[2].detail == "peaked at 9 GiB (probe)");
  for (const auto& log : logs) {
    for (int64_t i = 0; i < 3; ++i) CHECK(log.probed.at(i) == 1);
    CHECK(log.stepped.at(0) == 3);
    CHECK(log.stepped.count(1) == 0);  // neither rank stepped B or C
    CHECK(log.stepped.count(2) == 0);
    for (int64_t i = 0; i < 3; ++i) CHECK(log.done.at(i) == 1);
  }
}

TEST_CASE(
    "collective_search: a time cap stops every rank before the same candidate, by rank 0's "
    "clock") {
  Fakes f;
  f.ms = {{10, 5, 7}, {10, 9, 6}};  // slowest: 10, 9, 7
  // Each step takes a second on rank 0's clock; rank 1's runs 100 times as
  // fast, and would stop after A: its word does not count.
  f.clock = [](int64_t rank, const RankLog& log) {
    int64_t steps = 0;
    for (const auto& [i, k] : log.stepped) steps += k;
    return (rank == 0 ? 1.0 : 100.0) * static_cast<double>(steps);
  };
  // A's three steps (3 s) leave room for B's to start; after B's (6 s) no candidate starts.
  f.options.seconds(4);
  const auto logs = run_ranks(f, kTexts);
  check_agreed(logs);
  const auto& c = logs[0].choice;
  CHECK(c.cut);
  CHECK(c.stepped == 2);
  CHECK_FALSE(c.estimated);
  CHECK(c.chosen == 1);  // the fastest measured
  CHECK(c.trials[2].status == "not measured (search cut)");
  for (const auto& log : logs) {
    CHECK(log.stepped.count(2) == 0);  // C: never stepped, on either rank
    CHECK(log.done.count(2) == 0);
  }
  CHECK(c.summary() ==
        "plan B (measured, the slowest rank's median: plan A 10.0 ms; plan B 9.00 ms; plan C not "
        "measured (search cut); search cut at the 4 s cap after 2 trials)");
  // A cap of 0: nothing is stepped; the first candidate estimated to fit
  // every rank (the list comes fastest estimated first) is taken unmeasured.
  f.options.seconds(0);
  f.fits = [](int64_t rank, int64_t i) { return !(rank == 1 && i == 0); };
  const auto zero = run_ranks(f, kTexts);
  check_agreed(zero);
  CHECK(zero[0].choice.chosen == 1);
  CHECK(zero[0].choice.estimated);
  CHECK(zero[0].choice.stepped == 0);
  for (const auto& log : zero) CHECK(log.stepped.empty());
  CHECK(zero[0].choice.summary() ==
        "plan B (estimated, not measured; measured, the slowest rank's median: plan A over budget "
        "(estimated) on rank 1; plan B not measured (search cut); plan C not measured (search "
        "cut); search cut at the 0 s cap after 0 trials)");
  // A cap longer than the search: as without one (the default).
  f.fits = [](int64_t, int64_t) { return true; };
  f.options.seconds(1e9);
  const auto all = run_ranks(f, kTexts);
  check_agreed(all);
  CHECK_FALSE(all[0].choice.cut);
  CHECK(all[0].choice.chosen == 2);
  CHECK(all[0].choice.summary() ==
        "plan C (measured, the slowest rank's median: plan A 10.0 ms; plan B 9.00 ms; plan C "
        "7.00 ms)");
  CHECK(std::isinf(fno::CollectiveSearchOptions().seconds()));
}

TEST_CASE("search_cap: the cap's clock, its note, and the best plan estimated to fit") {
  double now = 100;
  const fno::SearchCap cap(2.5, [&] { return now; });
  CHECK_FALSE(cap.expired());
  now = 101;
  CHECK_FALSE(cap.expired(1.0));  // a trial expected to end within the cap may start
  CHECK(cap.expired(1.5));        // one expected to end after it may not
  now = 102.4;
  CHECK_FALSE(cap.expired());
  CHECK(cap.elapsed() == doctest::Approx(2.4));
  now = 102.5;
  CHECK(cap.expired());
  CHECK(fno::SearchCap(0, [&] { return now; }).expired());  // 0: no trial starts
  CHECK_FALSE(fno::SearchCap().expired());                  // no cap
  CHECK_FALSE(fno::SearchCap(std::numeric_limits<double>::infinity()).expired());
  CHECK(fno::search_cut_note(60, 3) == "search cut at the 60 s cap after 3 trials");
  CHECK(fno::search_cut_note(0.5, 1) == "search cut at the 0.5 s cap after 1 trial");
  // The lowest score among the plans estimated within the limit and not failed in a trial.
  const std::vector<fno::EstimatedPlan> plans{{900, 1.0, false},  // over the limit
                                              {500, 2.0, true},   // failed in a trial
                                              {400, 4.0, false},
                                              {450, 3.0, false},
                                              {300, 3.0, false}};  // a tie: the earlier one
  CHECK(fno::best_estimated(plans, 500) == 3);
  CHECK(fno::best_estimated(plans, 1000) == 0);
  CHECK(fno::best_estimated(plans, 299) == -1);
  CHECK(fno::best_estimated({}, 1000) == -1);
}

TEST_CASE("collective_search: one rank, and ranks whose candidate lists differ") {
  Fakes f;
  f.ms = {{3, 2}};
  const auto one = run_ranks(f, {"x", "y"});
  CHECK(one[0].choice.chosen == 1);
  CHECK(one[0].choice.trials[1].rank_ms == std::vector<double>{2});
  // Another number of candidates on rank 1: every rank refuses, none hangs.
  f.ms = {{3, 2}, {3, 2}};
  const auto differ = run_ranks(f, {}, {{"x", "y"}, {"x"}});
  for (const auto& log : differ) {
    CHECK(log.error.find("the ranks hold different numbers of candidates") != std::string::npos);
  }
  // Bad arguments.
  fno::CollectiveSteps steps;
  const fno::GroupSum same = [](const std::vector<double>& v) { return v; };
  CHECK_THROWS_AS(fno::collective_search(0, 1, {"x"}, steps, same), std::invalid_argument);
  steps.fits = [](int64_t) { return true; };
  steps.step = [](int64_t) { return 1.0; };
  CHECK_THROWS_AS(fno::collective_search(1, 1, {"x"}, steps, same), std::invalid_argument);
  CHECK(fno::collective_search(0, 1, {}, steps, same).chosen == -1);
}

TEST_CASE("collective_search over a Gloo group of two ranks whose steps are collective") {
  // Each step all-reduces a tensor, as a band step's exchanges do: the ranks
  // must step the same candidate at the same time, or the sums would mix.
  std::vector<fno::CollectiveChoice> choices(2);
  fno::test::run_ranks(2, [&](int64_t r, std::shared_ptr<fno::dist::Group> group) {
    fno::CollectiveSteps steps;
    steps.fits = [&](int64_t i) { return !(r == 0 && i == 0); };  // A: over rank 0's budget
    steps.step = [&](int64_t i) {
      auto t = torch::full({1}, static_cast<double>(10 * i + r), torch::kDouble);
      group->all_reduce_sum(t);
      TORCH_CHECK(t.item<double>() == 20.0 * static_cast<double>(i) + 1.0,
                  "the ranks stepped different candidates");
      return r == 1 ? 3.0 - static_cast<double>(i) : 1.0;  // rank 1 is the slower
    };
    choices[static_cast<size_t>(r)] = fno::collective_search(
        r, 2, kTexts, steps,
        [&](const std::vector<double>& v) { return group->all_reduce_sum(v); });
  });
  for (const auto& c : choices) {
    CHECK(c.chosen == 2);  // B: rank 1 takes 2 ms, C: 1 ms
    REQUIRE(c.trials.size() == 3);
    CHECK(c.trials[0].status == "over budget (estimated) on rank 0");
    CHECK(c.trials[1].rank_ms == std::vector<double>{1, 2});
    CHECK(c.trials[2].ms == 1);
    CHECK(c.summary() == choices[0].summary());
  }
}
