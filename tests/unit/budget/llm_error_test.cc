// budget/llm_error.h: refusals in each provider's error shape, as their SDKs parse them.
#include "budget/llm_error.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace sandgate::budget {
namespace {

TEST(LlmError, OpenAiShape) {
  auto v = boost::json::parse(
      llmErrorBody(LlmApi::kOpenai, 429, "budget_exceeded", "budget `daily` is used up"));
  const auto& e = v.as_object().at("error").as_object();
  EXPECT_EQ(e.at("message"), "budget `daily` is used up");
  EXPECT_EQ(e.at("type"), "rate_limit_exceeded");
  EXPECT_EQ(e.at("code"), "budget_exceeded");
  EXPECT_TRUE(e.at("param").is_null());
}

TEST(LlmError, AnthropicShape) {
  auto v = boost::json::parse(
      llmErrorBody(LlmApi::kAnthropic, 403, "model_not_allowed", "model \"x\"\n not allowed"));
  const auto& o = v.as_object();
  EXPECT_EQ(o.at("type"), "error");
  const auto& e = o.at("error").as_object();
  EXPECT_EQ(e.at("type"), "permission_error");
  EXPECT_EQ(e.at("message"), "model \"x\"\n not allowed");  // escaped, not structure
}

}  // namespace
}  // namespace sandgate::budget
