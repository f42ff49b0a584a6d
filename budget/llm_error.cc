// Refusal bodies in an LLM provider's error shape (see llm_error.h).
#include "budget/llm_error.h"

#include <boost/json.hpp>

namespace sandgate::budget {

namespace {

std::string_view openAiType(int status) {
  switch (status) {
    case 429:
      return "rate_limit_exceeded";
    case 403:
      return "permission_error";
    case 413:
      return "request_too_large";
    case 503:
      return "server_error";
    default:
      return "invalid_request_error";
  }
}

std::string_view anthropicType(int status) {
  switch (status) {
    case 429:
      return "rate_limit_error";
    case 403:
      return "permission_error";
    case 413:
      return "request_too_large";
    case 503:
      return "overloaded_error";
    default:
      return "invalid_request_error";
  }
}

}  // namespace

std::string llmErrorBody(LlmApi api, int status, std::string_view reason,
                         std::string_view message) {
  boost::json::object error;
  // Serialised by Boost.JSON: whatever `message` holds comes out escaped, never as structure.
  error["message"] = message;
  if (api == LlmApi::kAnthropic) {
    error["type"] = anthropicType(status);
    return boost::json::serialize(boost::json::object{{"type", "error"}, {"error", error}});
  }
  error["type"] = openAiType(status);
  error["param"] = nullptr;
  error["code"] = reason;
  return boost::json::serialize(boost::json::object{{"error", error}});
}

}  // namespace sandgate::budget
