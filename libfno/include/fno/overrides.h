// Experiment overrides: the FNO_* environment variables that change how a run
// computes (a LibTorch reference path beside a fused kernel, a kernel's
// launch tuning, where auto keeps its plans), for measurements and tests.
// They are listed here once (overrides()), read once per process, and a run
// records the ones set (overrides_set(): fno_train's summary.json, fno_bench's
// JSON, fno_predict's summary). Settings a user chooses are config keys, not
// overrides. docs/development.md#experiment-overrides describes each.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fno {

struct Override {
  const char* name;
  const char* meaning;  // one line: what setting it does
};

/// Every override, in one place.
const std::vector<Override>& overrides();

/// Override `name`'s value as this process's environment held it when first
/// asked (nullptr: unset). `name` must be listed (std::logic_error otherwise).
const char* override_value(const char* name);
/// A switch: on unless set to "0".
bool override_on(const char* name);
/// An integer override, `fallback` when unset or not an integer.
int override_int(const char* name, int fallback);

/// The listed overrides set in this process: (name, value), in the list's order.
std::vector<std::pair<std::string, std::string>> overrides_set();

/// Says on stderr, once per (what, shape) in the process, that `what` (a
/// fused kernel) runs the LibTorch path for `shape` and why: a fallback is
/// never silent.
void say_fallback(const std::string& what, const std::string& shape, const std::string& why);

}  // namespace fno
