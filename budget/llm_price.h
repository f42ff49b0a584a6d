// What LLM calls cost, in millionths of the config's currency: a price per million tokens is
// exactly that many millionths per token, so spend is counted in whole numbers (a counter can
// add and compare it exactly, across replicas) and only shown as a decimal.
#pragma once

#include <cstdint>

#include "budget/llm_usage.h"

namespace sandgate::budget {

struct ModelPrice {
  double input = 0;   // per million input tokens
  double output = 0;  // per million output tokens
};

// The spend of `usage` at `price`, in millionths, rounded up (a fraction of a millionth is
// charged, never given away); saturates at INT64_MAX instead of wrapping.
int64_t spendMicros(const LlmUsage& usage, const ModelPrice& price);

// The worst case of a request before it runs: its input bytes as tokens (a token is at least
// one byte of the request's text, so bytes bound tokens from above) and `maxTokens` of output.
LlmUsage worstCase(uint64_t requestBytes, uint64_t maxTokens);

}  // namespace sandgate::budget
