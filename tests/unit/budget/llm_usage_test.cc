// budget/llm_usage.h: usage from a JSON response and from SSE streams in each provider's
// shape; a hostile upstream's -1, huge or non-numeric counts are no usage.
#include "budget/llm_usage.h"

#include <gtest/gtest.h>

namespace sandgate::budget {
namespace {

TEST(LlmUsage, JsonResponses) {
  auto chat = usageOfJson(LlmApi::kOpenai,
                          R"({"id":"x","usage":{"prompt_tokens":12,"completion_tokens":34}})");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->inputTokens, 12u);
  EXPECT_EQ(chat->outputTokens, 34u);
  auto responses =
      usageOfJson(LlmApi::kOpenai, R"({"usage":{"input_tokens":5,"output_tokens":6}})");
  ASSERT_TRUE(responses);
  EXPECT_EQ(responses->outputTokens, 6u);
  auto anthropic = usageOfJson(
      LlmApi::kAnthropic,
      R"({"usage":{"input_tokens":10,"cache_read_input_tokens":90,"output_tokens":3}})");
  ASSERT_TRUE(anthropic);
  EXPECT_EQ(anthropic->inputTokens, 100u);
  EXPECT_EQ(anthropic->outputTokens, 3u);
}

TEST(LlmUsage, HostileCountsAreNoUsage) {
  for (const char* body : {
           R"({"usage":{"prompt_tokens":-1,"completion_tokens":5}})",
           R"({"usage":{"prompt_tokens":1e300,"completion_tokens":5}})",
           R"({"usage":{"prompt_tokens":"5","completion_tokens":5}})",
           R"({"usage":{"prompt_tokens":99999999999999999,"completion_tokens":5}})",
           R"({"usage":{"prompt_tokens":5}})",
           R"({"usage":null})",
           R"({"no":"usage"})",
           "not json",
       }) {
    EXPECT_FALSE(usageOfJson(LlmApi::kOpenai, body)) << body;
  }
}

TEST(LlmUsage, OpenAiStreamFinalChunk) {
  SseUsage sse(LlmApi::kOpenai);
  sse.feed("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n");
  EXPECT_FALSE(sse.usage());
  // Split anywhere: the reader keeps its place across pieces.
  std::string last =
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":9}}\r\n\r\n"
      "data: [DONE]\n\n";
  for (char c : last) sse.feed(std::string_view(&c, 1));
  ASSERT_TRUE(sse.usage());
  EXPECT_EQ(sse.usage()->inputTokens, 7u);
  EXPECT_EQ(sse.usage()->outputTokens, 9u);
}

TEST(LlmUsage, AnthropicStream) {
  SseUsage sse(LlmApi::kAnthropic);
  sse.feed(
      "event: message_start\n"
      "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,"
      "\"output_tokens\":1}}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"x\"}}\n\n");
  ASSERT_TRUE(sse.usage());
  EXPECT_EQ(sse.usage()->outputTokens, 1u);
  // Cut here, the stream has not reported what it produced: message_start's output count is
  // its first token's, and settling at it would charge a cut stream almost nothing.
  EXPECT_FALSE(sse.finalUsage());
  sse.feed(
      "event: message_delta\n"
      "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n");
  EXPECT_EQ(sse.usage()->inputTokens, 25u);
  EXPECT_EQ(sse.usage()->outputTokens, 15u);
  ASSERT_TRUE(sse.finalUsage());
  EXPECT_EQ(sse.finalUsage()->outputTokens, 15u);
}

TEST(LlmUsage, AStreamCutBeforeItsUsageHasNone) {
  SseUsage sse(LlmApi::kOpenai);
  sse.feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tok");
  EXPECT_FALSE(sse.usage());
  SseUsage anthropic(LlmApi::kAnthropic);
  anthropic.feed(
      "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n");  // no start
  EXPECT_FALSE(anthropic.usage());
}

}  // namespace
}  // namespace sandgate::budget
