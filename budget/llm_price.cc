// The spend of LLM calls (see llm_price.h).
#include "budget/llm_price.h"

#include <cmath>
#include <limits>

namespace sandgate::budget {

int64_t spendMicros(const LlmUsage& usage, const ModelPrice& price) {
  // In long double: 2^40 tokens at any sane price stays exact enough, and the result is
  // compared with INT64_MAX before it is converted.
  const long double micros = static_cast<long double>(usage.inputTokens) * price.input +
                             static_cast<long double>(usage.outputTokens) * price.output;
  constexpr long double kMax = static_cast<long double>(std::numeric_limits<int64_t>::max());
  if (!(micros >= 0)) return 0;  // NaN or negative prices never reach here from the config
  if (micros >= kMax) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(std::ceil(micros));
}

LlmUsage worstCase(uint64_t requestBytes, uint64_t maxTokens) {
  return LlmUsage{requestBytes, maxTokens};
}

}  // namespace sandgate::budget
