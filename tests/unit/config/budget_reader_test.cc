// Tests of `budgets:` in a policy and a task (config/budget_reader.cc).
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::Expected;
using testing::expectOne;
using testing::loadErrors;
using testing::loadOk;

TEST(BudgetReader, PolicyAndTaskBudgets) {
  auto c = loadOk(
      "policies:\n"
      "  agent:\n"
      "    budgets:\n"
      "      - {name: per-minute, window: minute, requests: 600}\n"
      "      - {name: egress, window: run, request_bytes: 100MiB, response_bytes: 1G}\n"
      "tasks:\n"
      "  - name: t\n"
      "    policy: agent\n"
      "    budgets: [{name: daily, window: day, requests: 5}]\n");
  const auto& p = c.policies.at("agent");
  ASSERT_EQ(p.budgets.size(), 2u);
  EXPECT_EQ(p.budgets[0].name, "per-minute");
  EXPECT_EQ(p.budgets[0].window, BudgetWindow::kMinute);
  EXPECT_EQ(p.budgets[0].requests, 600u);
  EXPECT_FALSE(p.budgets[0].requestBytes);
  EXPECT_EQ(p.budgets[0].mark.line, 4);
  EXPECT_EQ(p.budgets[1].window, BudgetWindow::kRun);
  EXPECT_EQ(p.budgets[1].requestBytes, 100u << 20);
  EXPECT_EQ(p.budgets[1].responseBytes, 1u << 30);
  ASSERT_EQ(c.tasks[0].budgets.size(), 1u);
  EXPECT_EQ(c.tasks[0].budgets[0].window, BudgetWindow::kDay);
  EXPECT_EQ(c.tasks[0].budgets[0].keyPath, "tasks[0].budgets[0]");
}

TEST(BudgetReader, Errors) {
  struct Case {
    const char* name;
    const char* budgets;
    Expected want;
  } cases[] = {
      {"unknown window",
       "[{name: b, window: week, requests: 1}]",
       {3, 33, "policies.p.budgets[0].window", "expected minute, hour, day or run"}},
      {"no window", "[{name: b, requests: 1}]", {3, 15, "policies.p.budgets[0]", "window"}},
      {"no limit",
       "[{name: b, window: day}]",
       {3, 15, "policies.p.budgets[0]", "at least one of requests"}},
      {"zero requests",
       "[{name: b, window: day, requests: 0}]",
       {3, 48, "policies.p.budgets[0].requests", ""}},
      {"negative bytes",
       "[{name: b, window: day, request_bytes: -5}]",
       {3, 53, "policies.p.budgets[0].request_bytes", ""}},
      {"unknown key",
       "[{name: b, window: day, requests: 1, requets: 5}]",
       {3, 51, "policies.p.budgets[0].requets", "requests"}},
      {"duplicate name",
       "[{name: b, window: day, requests: 1}, {name: b, window: run, requests: 1}]",
       {3, 59, "policies.p.budgets[1].name", "duplicate budget name `b`"}},
      {"bad name",
       "[{name: \"a b\", window: day, requests: 1}]",
       {3, 22, "policies.p.budgets[0].name", "invalid name"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expectOne(loadErrors(std::string("policies:\n  p:\n    budgets: ") + c.budgets + "\n"), c.want);
  }
}

TEST(BudgetReader, ATaskBudgetMayNotShareAPolicyBudgetsName) {
  // One name for both would count each request twice, against two limits.
  expectOne(
      loadErrors("policies:\n"
                 "  p: {budgets: [{name: b, window: day, requests: 5}]}\n"
                 "tasks:\n"
                 "  - {name: t, policy: p, budgets: [{name: b, window: day, requests: 1}]}\n"),
      {4, 36, "tasks[0].budgets[0]", "also a budget of policy `p` (line 2)"});
}

}  // namespace
}  // namespace sandgate::config
