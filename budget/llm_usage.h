// What an LLM API response says it used: the `usage` of a JSON response, or of a stream of
// server-sent events (OpenAI's final chunk with `usage`; Anthropic's message_start, whose
// usage has the input tokens, and message_delta, whose usage has the output so far). The
// response is the upstream's: a count that is not a whole number from 0 to kMaxUsageTokens
// (-1, 1e300, "5") is no count, and the caller settles at what it reserved.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "budget/llm_request.h"

namespace sandgate::budget {

struct LlmUsage {
  uint64_t inputTokens = 0;
  uint64_t outputTokens = 0;
};

inline constexpr uint64_t kMaxUsageTokens = uint64_t{1} << 40;

// The usage of a whole JSON response body; nullopt when it has none that reads.
std::optional<LlmUsage> usageOfJson(LlmApi api, std::string_view body);

// Reads a stream of server-sent events as it passes, keeping only what usage it reports.
// Bounded: an event longer than kMaxEventBytes is skipped (its usage is lost, not its bytes).
class SseUsage {
 public:
  explicit SseUsage(LlmApi api) : api_(api) {}
  void feed(std::string_view bytes);
  // The usage seen so far; nullopt when no event reported one (a stream cut short, or an
  // upstream that never sends it).
  std::optional<LlmUsage> usage() const;
  // The usage once the stream has reported its final count: OpenAI's usage chunk, Anthropic's
  // message_delta (message_start's output count is only the first token's, so a stream cut
  // after it has not reported what it produced). nullopt otherwise.
  std::optional<LlmUsage> finalUsage() const;
  // OpenAI: whether an event carried the final usage chunk.
  static constexpr size_t kMaxEventBytes = 1 << 20;

 private:
  void event(std::string_view data);
  LlmApi api_;
  std::string line_;  // the line being read
  std::string data_;  // the event's data lines so far
  bool skipping_ = false;
  std::optional<uint64_t> input_, output_;
  bool delta_ = false;  // Anthropic: a message_delta carried the output count
};

}  // namespace sandgate::budget
