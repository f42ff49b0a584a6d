// Budget windows in time: which window a moment falls in and when it ends. Windows are aligned
// to the Unix epoch (UTC), so that every replica, whatever its start time, counts a task's
// requests in the same window and a shared store sums them.
#pragma once

#include <cstdint>

#include "config/config.h"

namespace sandgate::budget {

struct WindowSpan {
  int64_t index = 0;   // run: always 0
  int64_t endsAt = 0;  // Unix seconds the window ends at; run: 0 (it never ends)
};

// The length of `w` in seconds; 0 for run.
int64_t windowSeconds(config::BudgetWindow w);

// The window of `w` that holds Unix time `now` (seconds, >= 0).
WindowSpan windowAt(config::BudgetWindow w, int64_t now);

}  // namespace sandgate::budget
