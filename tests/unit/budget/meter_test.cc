// budget/meter.h: admission takes from every budget or from none, byte budgets admit while
// they have room and reserve announced bodies, settle adds the difference once.
#include "budget/meter.h"

#include <gtest/gtest.h>

#include "budget/local_counter.h"

namespace sandgate::budget {
namespace {

config::Budget budget(std::string name, config::BudgetWindow w) {
  config::Budget b;
  b.name = std::move(name);
  b.window = w;
  return b;
}

TEST(Meter, RequestBudgetRefusesTheOneOverWithRetryAfter) {
  int64_t clock = 6015;
  LocalCounter c(LocalCounter::kDefaultMaxKeys, [&] { return clock; });
  auto b = budget("per-minute", config::BudgetWindow::kMinute);
  b.requests = 2;
  std::vector<config::Budget> list{b};
  Admission a;
  const int64_t now = 6000 + 15;  // 45 s before the minute ends
  EXPECT_FALSE(admit(c, "t", list, now, std::nullopt, a));
  EXPECT_FALSE(admit(c, "t", list, now, std::nullopt, a));
  auto over = admit(c, "t", list, now, std::nullopt, a);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->budget, &list[0]);
  EXPECT_EQ(over->metric, Metric::kRequests);
  EXPECT_EQ(over->used, 2);
  EXPECT_EQ(over->limit, 2);
  EXPECT_EQ(over->retryAfter, 45);
  EXPECT_FALSE(over->unavailable);
  // Another task, and the next minute, have their own counts.
  EXPECT_FALSE(admit(c, "u", list, now, std::nullopt, a));
  clock = now + 45;
  EXPECT_FALSE(admit(c, "t", list, now + 45, std::nullopt, a));
}

TEST(Meter, ARunBudgetSaysNoRetry) {
  LocalCounter c;
  auto b = budget("egress", config::BudgetWindow::kRun);
  b.requests = 1;
  std::vector<config::Budget> list{b};
  Admission a;
  EXPECT_FALSE(admit(c, "t", list, 10, std::nullopt, a));
  auto over = admit(c, "t", list, 10, std::nullopt, a);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->retryAfter, 0);
}

TEST(Meter, ARefusalTakesNothingFromTheOtherBudgets) {
  LocalCounter c(LocalCounter::kDefaultMaxKeys, [] { return 10; });
  auto wide = budget("wide", config::BudgetWindow::kDay);
  wide.requests = 100;
  auto narrow = budget("narrow", config::BudgetWindow::kRun);
  narrow.requests = 1;
  std::vector<config::Budget> list{wide, narrow};
  Admission a;
  EXPECT_FALSE(admit(c, "t", list, 10, std::nullopt, a));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(admit(c, "t", list, 10, std::nullopt, a));
  // Only the one admitted request counts against the wide budget.
  EXPECT_EQ(c.get(counterKey("t", list[0], 0, Metric::kRequests)), 1);
}

TEST(Meter, ByteBudgetsAdmitWhileThereIsRoomAndReserveAnnouncedBodies) {
  LocalCounter c;
  auto b = budget("egress", config::BudgetWindow::kRun);
  b.requestBytes = 1000;
  b.responseBytes = 500;
  std::vector<config::Budget> list{b};
  Admission a;
  // An announced body larger than the budget is refused before a byte goes.
  auto over = admit(c, "t", list, 0, 1001, a);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->metric, Metric::kRequestBytes);
  EXPECT_EQ(over->used, 0);
  // 600 announced, 400 really sent: 400 counted.
  ASSERT_FALSE(admit(c, "t", list, 0, 600, a));
  settle(c, a, 400, 499);
  settle(c, a, 400, 499);  // once only
  const auto upKey = counterKey("t", b, 0, Metric::kRequestBytes);
  const auto downKey = counterKey("t", b, 0, Metric::kResponseBytes);
  EXPECT_EQ(c.get(upKey), 400);
  EXPECT_EQ(c.get(downKey), 499);
  // Unannounced (chunked) body: admitted while there is room, counted after.
  ASSERT_FALSE(admit(c, "t", list, 0, std::nullopt, a));
  settle(c, a, 0, 10);
  EXPECT_EQ(c.get(downKey), 509);
  over = admit(c, "t", list, 0, std::nullopt, a);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->metric, Metric::kResponseBytes);
  EXPECT_EQ(over->used, 509);
  EXPECT_EQ(over->limit, 500);
}

// A counter that cannot answer (a store that is full or unreachable).
class DownCounter final : public Counter {
 public:
  TakeResult tryAdd(std::string_view, int64_t, int64_t, int64_t) override {
    return {TakeResult::Status::kUnavailable, 0};
  }
  bool add(std::string_view, int64_t, int64_t) override { return false; }
  std::optional<int64_t> get(std::string_view) override { return std::nullopt; }
};

TEST(Meter, AnUnavailableCounterRefusesClosed) {
  DownCounter c;
  auto b = budget("b", config::BudgetWindow::kHour);
  b.responseBytes = 10;
  std::vector<config::Budget> list{b};
  Admission a;
  auto over = admit(c, "t", list, 0, std::nullopt, a);
  ASSERT_TRUE(over);
  EXPECT_TRUE(over->unavailable);
}

TEST(Meter, KeysOfDifferentTasksNeverMeet) {
  auto b = budget("b", config::BudgetWindow::kMinute);
  EXPECT_NE(counterKey("a:b", b, 1, Metric::kRequests), counterKey("a", b, 1, Metric::kRequests));
  EXPECT_EQ(counterKey("t", b, 7, Metric::kRequestBytes),
            "sandgate:budget:t:b:minute:7:request_bytes");
}

TEST(Meter, LlmCallsReserveTheWorstCaseAndSettleTheirUsage) {
  LocalCounter c(LocalCounter::kDefaultMaxKeys, [] { return int64_t{100}; });
  auto b = budget("spend", config::BudgetWindow::kRun);
  b.spendMicros = 1000;
  b.outputTokens = 500;
  std::vector<config::Budget> list{b};
  const auto spendKey = counterKey("t", b, 0, Metric::kSpend);
  const auto outKey = counterKey("t", b, 0, Metric::kOutputTokens);
  // A request that is no LLM call takes nothing from token and spend budgets.
  Admission plain;
  EXPECT_FALSE(admit(c, "t", list, 100, 10, plain));
  EXPECT_EQ(*c.get(spendKey), 0);
  // The worst case is reserved; a second one that would not fit beside it is refused.
  Admission a;
  LlmCost worst{.inputTokens = 100, .outputTokens = 400, .spendMicros = 700};
  EXPECT_FALSE(admit(c, "t", list, 100, 10, a, &worst));
  EXPECT_EQ(*c.get(spendKey), 700);
  Admission b2;
  auto over = admit(c, "t", list, 100, 10, b2, &worst);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->metric, Metric::kOutputTokens);  // checked before spend
  EXPECT_EQ(over->used, 400);
  EXPECT_EQ(*c.get(spendKey), 700);  // the refused one took nothing
  // Settled at the real usage, once; byte settling leaves it alone.
  settleLlm(c, a, LlmCost{.inputTokens = 20, .outputTokens = 30, .spendMicros = 90});
  settleLlm(c, a, LlmCost{.inputTokens = 0, .outputTokens = 0, .spendMicros = 0});
  settle(c, a, 10, 10);
  EXPECT_EQ(*c.get(spendKey), 90);
  EXPECT_EQ(*c.get(outKey), 30);
  // Now the second fits.
  EXPECT_FALSE(admit(c, "t", list, 100, 10, b2, &worst));
  EXPECT_EQ(*c.get(spendKey), 790);
}

}  // namespace
}  // namespace sandgate::budget
