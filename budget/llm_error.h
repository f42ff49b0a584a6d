// A refusal's body in an LLM provider's own error shape, so that its SDKs (which parse the
// provider's errors, not sandgate's) print sandgate's message instead of "unknown error":
//   OpenAI:    {"error": {"message", "type", "param": null, "code": <reason>}}
//   Anthropic: {"type": "error", "error": {"type", "message"}}
// `type` is the provider's word for the status: 429 rate_limit_exceeded / rate_limit_error,
// 403 permission_error, 400 invalid_request_error, 413 request_too_large, 503 overloaded.
#pragma once

#include <string>
#include <string_view>

#include "budget/llm_request.h"

namespace sandgate::budget {

// The JSON text (no trailing newline) for a refusal with `status` and `reason` (a sandgate
// reason token) saying `message`.
std::string llmErrorBody(LlmApi api, int status, std::string_view reason, std::string_view message);

}  // namespace sandgate::budget
