// LLM API names and exact spend amounts (see llm_api.h).
#include "common/llm_api.h"

namespace sandgate {

std::string_view llmApiName(LlmApi api) {
  return api == LlmApi::kAnthropic ? "anthropic" : "openai";
}

std::optional<LlmApi> parseLlmApi(std::string_view s) {
  if (s == "openai") return LlmApi::kOpenai;
  if (s == "anthropic") return LlmApi::kAnthropic;
  return std::nullopt;
}

std::optional<uint64_t> parseMicros(std::string_view s) {
  // Digits, optionally '.' and at most six more digits: exact, no exponent, no sign, so that
  // "1.00" is one million millionths on every replica and never a float rounding.
  size_t dot = s.find('.');
  std::string_view whole = s.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view{} : s.substr(dot + 1);
  if (whole.empty() || whole.size() > 12) return std::nullopt;
  if (dot != std::string_view::npos && (frac.empty() || frac.size() > 6)) return std::nullopt;
  uint64_t v = 0;
  for (char c : whole) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  uint64_t f = 0;
  for (size_t i = 0; i < 6; ++i) {
    char c = i < frac.size() ? frac[i] : '0';
    if (c < '0' || c > '9') return std::nullopt;
    f = f * 10 + static_cast<uint64_t>(c - '0');
  }
  return v * 1000000 + f;
}

}  // namespace sandgate
