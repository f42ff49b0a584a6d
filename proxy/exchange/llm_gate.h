// LLM calls under a rule's `llm:` (issue #41): the request body is read whole (bounded) before
// anything goes upstream and judged as the provider will read it (budget/llm_request.h): the
// model against the rule's list, the max output tokens against its cap. Its worst case (the
// body's bytes as input tokens, the max output tokens, their price) is reserved on the task's
// token and spend budgets; the response's `usage` (JSON, or the SSE events that carry it)
// settles it, and a call whose usage never comes (a stream cut short, a count that is not one)
// stays settled at the reserve. The body the upstream gets is the one judged, sent with a
// Content-Length: no second reading of the client's framing can differ from sandgate's.
//
// An OpenAI stream that did not ask for usage (`stream_options.include_usage`) is asked for it
// in the forwarded body, and the usage-only chunk that adds is taken out of what the client
// gets. Refusals carry the provider's error shape (budget/llm_error.h) so SDKs print them.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <memory>
#include <optional>
#include <string>

#include "budget/llm_price.h"
#include "budget/llm_usage.h"
#include "budget/meter.h"
#include "proxy/client/client_connection.h"
#include "proxy/exchange/budget_gate.h"
#include "proxy/exchange/git_gate.h"
#include "proxy/exchange/relay.h"

namespace sandgate::proxy {

// The most bytes an LLM call's body may have: it is held whole in memory to be judged.
inline constexpr size_t kMaxLlmBodyBytes = size_t{8} << 20;
// The output reserved for a call that names no max tokens under a rule without a cap: an
// estimate (README, "Budgets"), settled at the real usage when it comes.
inline constexpr uint64_t kUncappedOutputReserve = 4096;

// An LLM call admitted by its rule, before its budgets.
struct LlmCall {
  LlmApi api = LlmApi::kOpenai;
  std::string model;
  bool stream = false;
  bool hideUsageChunk = false;  // include_usage was added: its chunk is not the client's
  std::optional<budget::ModelPrice> price;
  std::string body;         // what goes upstream (the judged body, include_usage added)
  budget::LlmCost reserve;  // the worst case
};

struct LlmGateResult {
  std::optional<LlmCall> call;     // set: admitted by the rule
  std::optional<Refusal> refusal;  // else the refusal (provider-shaped body)
};

// Reads and judges the body of the request `parser` parsed (its head is `req`), under
// `rule`, for the task of `c`. On success the real parser has consumed the whole body (it
// is done) and the caller sends `call->body` in its place. `sentContinue` is set when the
// client asked for 100-continue and got it here.
boost::asio::awaitable<LlmGateResult> readLlmCall(
    boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser,
    boost::beast::flat_buffer& in, const ClientConnection& c, const config::LlmRule& rule,
    const AuditRecord& rec, const GitReadSome& readSome, const GitWrite& write, bool& sentContinue);

template <class Client>
boost::asio::awaitable<LlmGateResult> readLlmCallOn(
    Client& client, boost::beast::flat_buffer& in, const ClientConnection& c,
    boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser,
    const config::LlmRule& rule, const AuditRecord& rec, bool& sentContinue) {
  const auto [readSome, write] = clientBodyIo(client, toDuration(c.limits().bodyTimeout));
  co_return co_await readLlmCall(parser, in, c, rule, rec, readSome, write, sentContinue);
}

// The provider-shaped version of a refusal of an LLM call (its body replaced).
Refusal llmShaped(Refusal r, LlmApi api);

// The response side of an admitted call: reads usage from the body as it is relayed (and
// hides the usage chunk sandgate asked for), then settles the call's budgets and fills the
// audit record's "llm" field.
class LlmMeter : public BodyTap {
 public:
  LlmMeter(LlmCall call, BudgetGate& gate, AuditRecord& rec);
  ~LlmMeter() override;
  LlmMeter(const LlmMeter&) = delete;
  LlmMeter& operator=(const LlmMeter&) = delete;

  // The request went upstream (a call that never did costs nothing).
  void requestSent() { sent_ = true; }
  // The response head arrived: its status and whether its body is server-sent events.
  void responseStarted(int status, bool eventStream);
  void pass(std::string_view in, bool last, std::string& out) override;
  // The body that goes upstream in place of the client's.
  std::string_view body() const { return call_.body; }
  LlmApi api() const { return call_.api; }
  // Whether the tap may change the body's length (the client's framing is sandgate's then).
  bool changesLength() const { return call_.hideUsageChunk && eventStream_; }
  // Settles once: the usage if one was read, nothing for a call the upstream never answered
  // with a success, else the reserve. Called before the audit line is written.
  void settle();

 private:
  void filterEvents(std::string_view in, bool last, std::string& out);
  LlmCall call_;
  BudgetGate& gate_;
  AuditRecord& rec_;
  int status_ = 0;
  bool eventStream_ = false;
  bool settled_ = false;
  bool sent_ = false;
  std::string json_;  // a JSON response body, up to kMaxLlmBodyBytes
  bool jsonTooLong_ = false;
  std::unique_ptr<budget::SseUsage> sse_;
  std::string pending_;       // bytes of an event not ended yet (while hiding the usage chunk)
  bool passThrough_ = false;  // an event too long to hold: the rest goes as it comes
};

}  // namespace sandgate::proxy
