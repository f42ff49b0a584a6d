// Tests of the LLM parts of a config (config/llm_reader.cc): llm.prices, a rule's and a
// credential's `llm:`, the token and spend budgets, and the check that spend can be priced.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::Expected;
using testing::expectOne;
using testing::loadErrors;
using testing::loadOk;

// The issue's interface example (#41), as written there but for `state:` (Redis, stage 3).
const char* kIssueExample =
    "credentials:\n"
    "  openai:\n"
    "    source: {env: OPENAI_KEY}\n"
    "    hosts: [api.openai.example]\n"
    "    inject: {header: Authorization, value: \"Bearer {secret}\"}\n"
    "llm:\n"
    "  prices:                                       # per million tokens, in `currency`\n"
    "    currency: USD\n"
    "    models: { gpt-mini: { input: 0.50, output: 1.50 } }\n"
    "policies:\n"
    "  agent:\n"
    "    allow:\n"
    "      - host: api.openai.example\n"
    "        credential: openai\n"
    "        llm: { api: openai, models: [gpt-mini], max_tokens: 4096 }\n"
    "    budgets:\n"
    "      - { name: daily-spend, window: day, spend: 1.00 }\n"
    "      - { name: per-minute, window: minute, requests: 600 }\n"
    "      - { name: egress, window: run, request_bytes: 100MiB }\n";

TEST(LlmReader, TheIssueExampleLoads) {
  auto c = loadOk(kIssueExample);
  ASSERT_TRUE(c.llm.prices);
  EXPECT_EQ(c.llm.prices->currency, "USD");
  const auto& price = c.llm.prices->models.at("gpt-mini");
  EXPECT_DOUBLE_EQ(price.input, 0.5);
  EXPECT_DOUBLE_EQ(price.output, 1.5);
  const auto& rule = c.policies.at("agent").allow[0];
  ASSERT_TRUE(rule.llm);
  EXPECT_EQ(rule.llm->api, LlmApi::kOpenai);
  ASSERT_EQ(rule.llm->models.size(), 1u);
  EXPECT_EQ(rule.llm->models[0].value, "gpt-mini");
  EXPECT_EQ(rule.llm->maxTokens, 4096u);
  const auto& budgets = c.policies.at("agent").budgets;
  EXPECT_EQ(budgets[0].spendMicros, 1000000u);
  EXPECT_EQ(budgets[2].requestBytes, uint64_t{100} << 20);
}

TEST(LlmReader, TokenBudgetsCredentialApiAndExactDecimals) {
  auto c = loadOk(
      "credentials:\n"
      "  claude:\n"
      "    source: {env: K}\n"
      "    hosts: [api.anthropic.example]\n"
      "    inject: {header: x-api-key, value: \"{secret}\"}\n"
      "    llm: anthropic\n"
      "llm: {prices: {currency: EUR, models: {m: {input: 3, output: 0.000001}}}}\n"
      "policies:\n"
      "  p:\n"
      "    allow: [{host: api.anthropic.example, credential: claude}]\n"
      "tasks:\n"
      "  - name: t\n"
      "    policy: p\n"
      "    budgets: [{name: tok, window: hour, input_tokens: 1000, output_tokens: 50}]\n");
  EXPECT_EQ(c.credentials.at("claude").llm, LlmApi::kAnthropic);
  EXPECT_DOUBLE_EQ(c.llm.prices->models.at("m").output, 0.000001);
  EXPECT_EQ(c.tasks[0].budgets[0].inputTokens, 1000u);
  EXPECT_EQ(c.tasks[0].budgets[0].outputTokens, 50u);
}

TEST(LlmReader, Errors) {
  const std::string cred =
      "credentials:\n"
      "  o:\n"
      "    source: {env: K}\n"
      "    hosts: [h.example]\n"
      "    inject: {header: Authorization, value: \"Bearer {secret}\"}\n"
      "    llm: anthropic\n";
  const std::string prices = "llm: {prices: {currency: USD, models: {m: {input: 1, output: 2}}}}\n";
  struct Case {
    const char* name;
    std::string yaml;
    Expected want;
  } cases[] = {
      {"unknown api",
       "policies:\n  p:\n    allow: [{host: h.example, llm: {api: gemini}}]\n",
       {3, 42, "policies.p.allow[0].llm.api", "expected openai or anthropic"}},
      {"zero cap",
       "policies:\n  p:\n    allow: [{host: h.example, llm: {api: openai, max_tokens: 0}}]\n",
       {3, 62, "policies.p.allow[0].llm.max_tokens", ""}},
      {"llm on a deny rule",
       "policies:\n  p:\n    deny: [{host: h.example, llm: openai}]\n",
       {3, 30, "policies.p.deny[0].llm", "deny rule"}},
      {"api differs from the credential's",
       cred +
           "policies:\n  p:\n    allow: [{host: h.example, credential: o, llm: {api: openai}}]\n",
       {9, 46, "policies.p.allow[0].llm", "credential `o` says llm: anthropic"}},
      {"spend with an exponent",
       prices + "policies:\n  p:\n    budgets: [{name: s, window: day, spend: 1e3}]\n",
       {4, 45, "policies.p.budgets[0].spend", "at most 6 decimals"}},
      {"spend with seven decimals",
       prices + "policies:\n  p:\n    budgets: [{name: s, window: day, spend: 0.0000001}]\n",
       {4, 45, "policies.p.budgets[0].spend", "at most 6 decimals"}},
      {"negative price",
       "llm: {prices: {currency: USD, models: {m: {input: -1, output: 2}}}}\n",
       {1, 51, "llm.prices.models.m.input", "a price per million tokens"}},
      {"spend without prices",
       "policies:\n  p:\n    budgets: [{name: s, window: day, spend: 1}]\n",
       {3, 15, "policies.p.budgets[0].spend", "needs llm.prices"}},
      {"spend over a rule with no model list",
       prices + cred +
           "policies:\n  p:\n    allow: [{host: h.example, credential: o}]\n"
           "    budgets: [{name: s, window: day, spend: 1}]\n",
       {10, 13, "policies.p.allow[0].llm", "list its models"}},
      {"spend over an unpriced model",
       prices +
           "policies:\n  p:\n    allow: [{host: h.example, llm: {api: openai, models: [m, x]}}]\n"
           "tasks: [{name: t, policy: p, budgets: [{name: s, window: day, spend: 1}]}]\n",
       {4, 62, "policies.p.allow[0].llm.models", "model `x` has no price"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expectOne(loadErrors(c.yaml), c.want);
  }
}

}  // namespace
}  // namespace sandgate::config
