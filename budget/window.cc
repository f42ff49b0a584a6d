// Budget windows in time (see window.h).
#include "budget/window.h"

namespace sandgate::budget {

int64_t windowSeconds(config::BudgetWindow w) {
  switch (w) {
    case config::BudgetWindow::kMinute:
      return 60;
    case config::BudgetWindow::kHour:
      return 3600;
    case config::BudgetWindow::kDay:
      return 86400;
    case config::BudgetWindow::kRun:
      return 0;
  }
  return 0;
}

WindowSpan windowAt(config::BudgetWindow w, int64_t now) {
  const int64_t len = windowSeconds(w);
  if (len == 0) return {};
  if (now < 0) now = 0;  // a clock before 1970 counts in the first window, not a negative one
  const int64_t index = now / len;
  return {index, (index + 1) * len};
}

}  // namespace sandgate::budget
