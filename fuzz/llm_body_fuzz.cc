// Fuzzes the LLM readers of budget/ with hostile bytes: a client's request body
// (budget/llm_request.h) and an upstream's response body and server-sent events
// (budget/llm_usage.h).
//
// Properties, beyond not crashing:
//  - A request that reads has a model of 1..kMaxModelBytes printable ASCII bytes and a token
//    limit in 1..kMaxLlmTokens, and reading it again after a round trip through Boost.JSON
//    gives the same request: what was judged is one reading.
//  - Usage counts are within kMaxUsageTokens (Anthropic's input adds three of them).
//  - A stream read in one piece and read one byte at a time reports the same usage: where
//    the network cuts the bytes changes nothing.
#include <boost/json.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "budget/llm_request.h"
#include "budget/llm_usage.h"
#include "fuzz/check.h"

namespace {

using namespace sandgate::budget;
using sandgate::LlmApi;

void checkRequest(LlmApi api, std::string_view body) {
  auto r = readLlmRequest(api, body);
  if (!r.request) {
    SANDGATE_FUZZ_CHECK(!r.problem.empty(), "a refusal says why");
    return;
  }
  const auto& q = *r.request;
  SANDGATE_FUZZ_CHECK(!q.model.empty() && q.model.size() <= kMaxModelBytes, "model length");
  for (char c : q.model) SANDGATE_FUZZ_CHECK(c >= 0x21 && c <= 0x7e, "model is printable");
  if (q.maxTokens) {
    SANDGATE_FUZZ_CHECK(*q.maxTokens >= 1 && *q.maxTokens <= kMaxLlmTokens, "limit range");
  }
  const std::string again = boost::json::serialize(boost::json::parse(body));
  auto r2 = readLlmRequest(api, again);
  SANDGATE_FUZZ_CHECK(r2.request, "a request that read reads again");
  SANDGATE_FUZZ_CHECK(r2.request->model == q.model && r2.request->maxTokens == q.maxTokens &&
                          r2.request->stream == q.stream,
                      "one reading");
}

void checkUsage(LlmApi api, std::string_view body) {
  const uint64_t bound = api == LlmApi::kAnthropic ? 3 * kMaxUsageTokens : kMaxUsageTokens;
  if (auto u = usageOfJson(api, body)) {
    SANDGATE_FUZZ_CHECK(u->inputTokens <= bound && u->outputTokens <= kMaxUsageTokens,
                        "usage bounded");
  }
  SseUsage whole(api), bytes(api);
  whole.feed(body);
  for (char c : body) bytes.feed(std::string_view(&c, 1));
  auto a = whole.usage();
  auto b = bytes.usage();
  SANDGATE_FUZZ_CHECK(a.has_value() == b.has_value(), "pieces change nothing");
  if (a) {
    SANDGATE_FUZZ_CHECK(a->inputTokens == b->inputTokens && a->outputTokens == b->outputTokens,
                        "pieces change nothing");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (auto api : {LlmApi::kOpenai, LlmApi::kAnthropic}) {
    checkRequest(api, body);
    checkUsage(api, body);
  }
  return 0;
}
