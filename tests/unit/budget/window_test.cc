// budget/window.h: windows aligned to the epoch, and when each ends.
#include "budget/window.h"

#include <gtest/gtest.h>

namespace sandgate::budget {
namespace {

using config::BudgetWindow;

TEST(BudgetWindow, AlignedToTheEpoch) {
  struct Case {
    const char* name;
    BudgetWindow w;
    int64_t now, index, endsAt;
  } cases[] = {
      {"minute start", BudgetWindow::kMinute, 120, 2, 180},
      {"minute last second", BudgetWindow::kMinute, 179, 2, 180},
      {"hour", BudgetWindow::kHour, 7201, 2, 10800},
      {"day", BudgetWindow::kDay, 86400 * 3 + 5, 3, 86400 * 4},
      {"run never ends", BudgetWindow::kRun, 123456, 0, 0},
      {"a clock before 1970 is the first window", BudgetWindow::kMinute, -5, 0, 60},
  };
  for (const auto& c : cases) {
    auto span = windowAt(c.w, c.now);
    EXPECT_EQ(span.index, c.index) << c.name;
    EXPECT_EQ(span.endsAt, c.endsAt) << c.name;
  }
}

}  // namespace
}  // namespace sandgate::budget
