// What config/ and budget/ both need to name an LLM API and an amount of spend, written once:
// the API a rule or credential speaks (`llm:`), and the exact decimal that prices and spend
// budgets are written in (config, and a task token's `budgets` claim).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sandgate {

// Which request and usage shapes the proxy reads on an intercepted LLM call
// (budget/llm_request.h, budget/llm_usage.h).
enum class LlmApi { kOpenai, kAnthropic };

// "openai", "anthropic".
std::string_view llmApiName(LlmApi api);
std::optional<LlmApi> parseLlmApi(std::string_view s);

// "1", "1.00", "0.000001" as millionths; nullopt for anything else (a sign, an exponent, more
// than 6 decimals, more than 12 whole digits). Exact, so that "1.00" is one million millionths
// on every replica and never a float rounding.
std::optional<uint64_t> parseMicros(std::string_view s);

}  // namespace sandgate
