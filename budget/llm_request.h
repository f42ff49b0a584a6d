// What an LLM API request asks for, read from its JSON body before it goes upstream: the
// model, the most output tokens it may produce, whether it streams. The body is the client's
// (the attacker's): one strict reading, so that what sandgate judges is what the provider
// reads. A body that is not one JSON object, that repeats a key at any depth (parsers differ
// on which one wins: the provider might read the other), whose model is not printable ASCII,
// or whose limits are not whole numbers in range is refused, never guessed at.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/llm_api.h"

namespace sandgate::budget {

struct LlmRequest {
  std::string model;
  // max_completion_tokens / max_tokens (Chat Completions), max_output_tokens (Responses),
  // max_tokens (Anthropic, where it is required); nullopt: the request sets none.
  std::optional<uint64_t> maxTokens;
  bool stream = false;
  bool includeUsage = false;  // OpenAI: stream_options.include_usage
};

struct LlmRequestRead {
  std::optional<LlmRequest> request;  // set: read
  std::string problem;                // else one sentence: why the body cannot be judged
};

// The most output tokens a request may name, and bytes of a model name.
inline constexpr uint64_t kMaxLlmTokens = (uint64_t{1} << 31) - 1;
inline constexpr size_t kMaxModelBytes = 256;
inline constexpr int kMaxJsonDepth = 64;

LlmRequestRead readLlmRequest(LlmApi api, std::string_view body);

}  // namespace sandgate::budget
