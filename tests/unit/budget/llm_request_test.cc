// budget/llm_request.h: a client's request body read once, strictly: duplicate keys, odd
// model bytes, limits that are not whole numbers in range, and bodies that are not one JSON
// object are refused with a reason, never read leniently.
#include "budget/llm_request.h"

#include <gtest/gtest.h>

namespace sandgate::budget {
namespace {

TEST(LlmRequest, ReadsModelLimitAndStream) {
  auto r = readLlmRequest(LlmApi::kOpenai,
                          R"({"model":"gpt-mini","max_completion_tokens":512,"stream":true,)"
                          R"("stream_options":{"include_usage":true},"messages":[]})");
  ASSERT_TRUE(r.request) << r.problem;
  EXPECT_EQ(r.request->model, "gpt-mini");
  EXPECT_EQ(r.request->maxTokens, 512u);
  EXPECT_TRUE(r.request->stream);
  EXPECT_TRUE(r.request->includeUsage);
  auto a = readLlmRequest(LlmApi::kAnthropic, R"({"model":"claude-x","max_tokens":1024})");
  ASSERT_TRUE(a.request) << a.problem;
  EXPECT_EQ(a.request->maxTokens, 1024u);
  EXPECT_FALSE(a.request->stream);
  auto none = readLlmRequest(LlmApi::kOpenai, R"({"model":"m","max_tokens":null})");
  ASSERT_TRUE(none.request) << none.problem;
  EXPECT_FALSE(none.request->maxTokens);
  // A trailing newline (curl -d @file) is whitespace, not a second document.
  EXPECT_TRUE(readLlmRequest(LlmApi::kOpenai, "{\"model\":\"m\"}\n\r\n ").request);
  auto responses = readLlmRequest(LlmApi::kOpenai, R"({"model":"m","max_output_tokens":7})");
  ASSERT_TRUE(responses.request);
  EXPECT_EQ(responses.request->maxTokens, 7u);
}

TEST(LlmRequest, RefusesWhatCouldBeReadTwoWays) {
  struct Case {
    const char* name;
    LlmApi api;
    std::string body;
    const char* problem;  // a substring of the reason
  } cases[] = {
      {"duplicate model", LlmApi::kOpenai, R"({"model":"cheap","model":"gpt-big"})", "twice"},
      {"duplicate nested", LlmApi::kOpenai,
       R"({"model":"m","stream_options":{"include_usage":true,"include_usage":false}})", "twice"},
      {"duplicate max_tokens", LlmApi::kAnthropic,
       R"({"model":"m","max_tokens":1,"max_tokens":100000})", "twice"},
      {"two limits", LlmApi::kOpenai, R"({"model":"m","max_tokens":1,"max_completion_tokens":9})",
       "more than one"},
      {"not json", LlmApi::kOpenai, "model=gpt", "not JSON"},
      // Boost.JSON reads 0e7512 as NaN and 1e400 as infinity, Python and Node as 0 and inf or
      // an error: a number whose reading differs is refused (llm_body_fuzz found the first).
      {"zero with a huge exponent", LlmApi::kOpenai, R"({"model":"m","x":0e7512})", "range"},
      {"infinite", LlmApi::kOpenai, R"({"model":"m","temperature":1e400})", "range"},
      {"array", LlmApi::kOpenai, "[1]", "not a JSON object"},
      {"trailing garbage", LlmApi::kOpenai, R"({"model":"m"} {"model":"n"})", "not JSON"},
      {"no model", LlmApi::kOpenai, R"({"max_tokens":5})", "no model"},
      {"model not a string", LlmApi::kOpenai, R"({"model":["a"]})", "no model"},
      {"model with a control", LlmApi::kOpenai, "{\"model\":\"gpt\\u001b[2Jmini\"}", "printable"},
      {"model with a space", LlmApi::kOpenai, R"({"model":"gpt mini"})", "printable"},
      {"model with a NUL", LlmApi::kOpenai, "{\"model\":\"gpt-mini\\u0000x\"}", "printable"},
      {"model non-ASCII", LlmApi::kOpenai, "{\"model\":\"gpt-m\xc3\xafni\"}", "printable"},
      {"long model", LlmApi::kOpenai, std::string(R"({"model":")") + std::string(300, 'a') + "\"}",
       "longer"},
      {"negative", LlmApi::kAnthropic, R"({"model":"m","max_tokens":-1})", "whole number"},
      {"zero", LlmApi::kAnthropic, R"({"model":"m","max_tokens":0})", "whole number"},
      {"fraction", LlmApi::kOpenai, R"({"model":"m","max_tokens":1.5})", "whole number"},
      {"exponent", LlmApi::kOpenai, R"({"model":"m","max_tokens":1e3})", "whole number"},
      {"huge", LlmApi::kOpenai, R"({"model":"m","max_tokens":18446744073709551616})",
       "whole number"},
      {"string count", LlmApi::kOpenai, R"({"model":"m","max_tokens":"5"})", "whole number"},
      {"stream not bool", LlmApi::kOpenai, R"({"model":"m","stream":"yes"})", "stream"},
      {"deep", LlmApi::kOpenai,
       std::string(R"({"model":"m","x":)") + std::string(100, '[') + std::string(100, ']') + "}",
       "deeper"},
  };
  for (const auto& c : cases) {
    auto r = readLlmRequest(c.api, c.body);
    EXPECT_FALSE(r.request) << c.name;
    EXPECT_NE(r.problem.find(c.problem), std::string::npos) << c.name << ": " << r.problem;
  }
}

}  // namespace
}  // namespace sandgate::budget
