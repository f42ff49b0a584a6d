// budget/llm_price.h: spend in whole millionths, rounded up, saturating.
#include "budget/llm_price.h"

#include <gtest/gtest.h>

#include <limits>

namespace sandgate::budget {
namespace {

TEST(LlmPrice, SpendInMillionths) {
  const ModelPrice gptMini{0.50, 1.50};  // USD per million tokens
  // 1000 in, 2000 out: 0.0005 + 0.003 = 0.0035 USD = 3500 millionths.
  EXPECT_EQ(spendMicros({1000, 2000}, gptMini), 3500);
  // One input token costs half a millionth: charged as one.
  EXPECT_EQ(spendMicros({1, 0}, gptMini), 1);
  EXPECT_EQ(spendMicros({0, 0}, gptMini), 0);
  // $1 is 1,000,000: 2,000,000 input tokens at $0.50 per million.
  EXPECT_EQ(spendMicros({2000000, 0}, gptMini), 1000000);
}

TEST(LlmPrice, HugeUsageSaturates) {
  const ModelPrice expensive{1e12, 1e12};
  EXPECT_EQ(spendMicros({kMaxUsageTokens, kMaxUsageTokens}, expensive),
            std::numeric_limits<int64_t>::max());
}

TEST(LlmPrice, WorstCaseCountsEveryByteAsAToken) {
  auto w = worstCase(4096, 512);
  EXPECT_EQ(w.inputTokens, 4096u);
  EXPECT_EQ(w.outputTokens, 512u);
}

}  // namespace
}  // namespace sandgate::budget
