// One HTTP request and its response, from the client through an upstream connection and back:
// the exchange that forwarded requests (forward/, TCP both sides) and intercepted ones
// (intercept/, TLS both sides) share. Its steps, in order: parse the head, the route's own
// check of it, the policy, the budgets, the header rewrite and the credential, the upstream
// connection (a reused one first, a request without a body sent again once on a new one when a
// reused one turns out closed), the request relayed, the response head, the scrubber and the
// framing, the response relayed, the audit line, and the decision whether either connection carries
// another request. A fix to any of these is made here once, for both routes.
//
// What differs between the routes is a Route (the type parameter of runExchange):
//
//   static constexpr bool kIntercepted;     // TLS to the client and the upstream
//   static constexpr bool kRelaysWebsocket; // a 101 to `Upgrade: websocket` is relayed
//   static constexpr std::string_view kKind;  // the audit kind once the upstream is reached
//   ClientStream& client();                 // the client's side: DeadlineStream or TlsChannel
//   beast::flat_buffer& clientBuffer();     // client bytes read and not consumed yet
//   UpstreamStream& upstream();             // valid after acquire() succeeded
//   beast::flat_buffer& upstreamBuffer();
//   RequestCredentials& credentials();
//   const policy::Target& target();
//   awaitable<void> refuse(RequestLog&, const Refusal&);        // the refusal, on client()
//   std::optional<Refusal> checkRequest(Request&, RequestLog&); // before the policy
//   policy::Request policyRequest(const Request&);              // what the policy decides on
//   void rewriteHead(Request&, bool websocket);                 // after the shared rewrite
//   awaitable<std::optional<Refusal>> acquire(const policy::Decision&, RequestLog&,
//                                             bool mayReuse, bool& reused);
//   void prepareSend(Request&);             // after acquire: the head as this upstream takes it
//   std::optional<Refusal> checkResponse(const ResponseParser&);  // the response head's own
//                                           // check (a parent's answer is not the upstream's)
//   void dropUpstream();                    // the upstream connection is not to be reused
//   void upstreamDone(bool clean);          // the exchange ended; clean: it may be reused
//   awaitable<void> switchProtocols(RequestLog&, ResponseParser&);  // kRelaysWebsocket only
//
// Internal to proxy/ (forward.cc, intercept_session.cc).
#pragma once

#include <fmt/format.h>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "broker/body_decoder.h"
#include "broker/scrubber.h"
#include "common/http_text.h"
#include "proxy/client/ask.h"
#include "proxy/client/chunked_framing.h"
#include "proxy/client/client_connection.h"
#include "proxy/exchange/budget_gate.h"
#include "proxy/exchange/form_gate.h"
#include "proxy/exchange/git_gate.h"
#include "proxy/exchange/headers.h"
#include "proxy/exchange/llm_gate.h"
#include "proxy/exchange/relay.h"
#include "proxy/exchange/request_credentials.h"

namespace sandgate::proxy {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::buffer_body>;
using Request = boost::beast::http::request<boost::beast::http::buffer_body>;

// Parses the request head (the first `headLen` bytes of `buffer`, which the session's validator
// has passed) into `parser` and consumes it. The refusal when Beast does not take it whole.
std::optional<Refusal> parseRequestHead(RequestParser& parser, boost::beast::flat_buffer& buffer,
                                        size_t headLen, const config::EffectiveLimits& limits,
                                        const AuditRecord& rec);

// The 400 for a request body whose framing is malformed (`reason`: bad_chunked_body or
// request_trailers).
Refusal framingRefusal(std::string_view reason, const std::string& detail, const AuditRecord& rec);

// The 400 for an Upgrade other than websocket, on a route that relays WebSocket only.
Refusal upgradeRefusal(const Request& req, const AuditRecord& rec, const std::string& rule);

// Writes "100 Continue" to a client that asked for it (sandgate answers it itself once the
// upstream is connected: the upstream sees an ordinary request with a body).
template <class Client>
boost::asio::awaitable<bool> sendContinue(Client& client, const config::EffectiveLimits& limits) {
  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  boost::beast::get_lowest_layer(client).expires_after(toDuration(limits.bodyTimeout));
  auto [ec, n] = co_await writeBytes(client, boost::asio::buffer(kContinue));
  co_return !ec;
}

// One request on `c` whose head (headLen bytes at the start of route.clientBuffer()) passed the
// session's validation. Returns true when the client connection may carry another request.
template <class Route>
boost::asio::awaitable<bool> runExchange(Route& route, ClientConnection& c, size_t headLen,
                                         RequestLog& log) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  auto& rec = log.record;
  const auto& limits = c.limits();
  const TaskEntry& task = *c.task;

  RequestParser parser;
  if (auto refusal = parseRequestHead(parser, route.clientBuffer(), headLen, limits, rec)) {
    co_await route.refuse(log, *refusal);
    co_return false;
  }
  auto& req = parser.get();
  if (auto refusal = route.checkRequest(req, log)) {
    co_await route.refuse(log, *refusal);
    co_return false;
  }
  const bool clientKeepAlive = req.keep_alive();
  const unsigned clientVersion = req.version();

  auto decision = decideHttpRequest(c, route.policyRequest(req), req);
  if (decision.askable) {
    // on_unknown: ask: held (no thread held with it) until an operator answers or it times out.
    // Named before co_await (GCC 12 and the arguments of a co_await full-expression).
    const policy::Request asked = route.policyRequest(req);
    auto asking = askOperator(c, asked, std::move(decision), log);
    decision = co_await std::move(asking);
  }
  rec.rule = decision.rule;
  if (!decision.allowed()) {
    Refusal refusal = policyRefusal(decision, task.name, rec.host,
                                    "ask for a policy rule that allows this request");
    co_await route.refuse(log, refusal);
    co_return false;
  }
  // Connection: upgrade with an Upgrade field asks to switch protocols (an Upgrade field alone
  // is a hop-by-hop field that is simply dropped). A route that does not relay WebSocket drops
  // it with the other hop-by-hop fields: the request goes as an ordinary one.
  bool websocket = false;
  if constexpr (Route::kRelaysWebsocket) {
    const bool upgrade = parser.upgrade() && req.find(http::field::upgrade) != req.end();
    websocket = upgrade && upgradesToWebsocket(req);
    if (upgrade && !websocket) {
      Refusal refusal = upgradeRefusal(req, rec, decision.rule);
      co_await route.refuse(log, refusal);
      co_return false;
    }
  }

  // A rule's `git:` block judges Git requests before anything reaches the upstream
  // (git_gate.h): a refused push is answered here, in Git's own protocol.
  bool sentContinue = false;
  // `_method` in a urlencoded form body is an override parameter as it is in the query
  // (form_gate.h): on a host whose rules restrict methods, paths or git, the body is judged
  // before the upstream sees it, and the request decided again with it.
  if (!parser.is_done() && isFormBody(req) && refusesOverrides(c, route.policyRequest(req))) {
    if (auto name = co_await formBodyOverrideOn(route.client(), route.clientBuffer(), c, parser,
                                                sentContinue)) {
      policy::Request again = route.policyRequest(req);
      again.overrideHeader = *name;
      decision = decideRequest(c, again);
      rec.rule = decision.rule;
      if (!decision.allowed()) {
        Refusal refusal = policyRefusal(decision, task.name, rec.host,
                                        "ask for a policy rule that allows this request");
        co_await route.refuse(log, refusal);
        co_return false;
      }
    }
  }
  if (decision.git) {
    const policy::Request asked = route.policyRequest(req);
    GitGateResult gate = co_await gateGitOn(route.client(), route.clientBuffer(), c, decision,
                                            asked.path.value_or(""), parser, log);
    if (gate.action == GitGateResult::Action::kRefuse) {
      co_await route.refuse(log, gate.refusal);
      co_return false;
    }
    if (gate.action == GitGateResult::Action::kAnswered) {
      rec.kind = Route::kKind;
      finishRequest(c, log);
      co_return false;
    }
    sentContinue = gate.sentContinue;
  }

  // A rule's `llm:` (llm_gate.h): an LLM call's body is read whole and judged (model, max
  // tokens) before anything goes upstream, on either route (a plain-HTTP call is no way
  // around it). A request without a body other than a POST (GET /v1/models) is no call.
  std::optional<LlmCall> llmCall;
  if (decision.llm && !(parser.is_done() && req.method() != http::verb::post)) {
    log.llmCall = true;
    auto gate = co_await readLlmCallOn(route.client(), route.clientBuffer(), c, parser,
                                       *decision.llm, rec, sentContinue);
    if (gate.refusal) {
      co_await route.refuse(log, *gate.refusal);
      co_return false;
    }
    llmCall = std::move(gate.call);
  }

  // The task's budgets, before anything goes upstream: a request over one is answered here.
  // What it moved is counted when the exchange ends, however it ends (the gate's destructor).
  BudgetGate budgets(c, log);
  {
    std::optional<uint64_t> announced;
    if (llmCall) {
      announced = llmCall->body.size();
    } else if (parser.is_done()) {
      announced = 0;
    } else if (auto n = parser.content_length()) {
      announced = *n;
    }
    if (auto refusal =
            co_await budgets.admitAsync(announced, llmCall ? &llmCall->reserve : nullptr)) {
      if (llmCall) *refusal = llmShaped(std::move(*refusal), llmCall->api);
      co_await route.refuse(log, *refusal);
      co_return false;
    }
  }
  // An admitted LLM call: its usage settles its reserve before the audit line is written
  // (destroyed before `budgets`, so also on every early return).
  std::optional<LlmMeter> meter;
  if (llmCall) meter.emplace(std::move(*llmCall), budgets, rec);

  const bool expectContinue = prepareRequestHead(req);
  route.rewriteHead(req, websocket);
  // The judged body's length, whatever the client's Connection field named hop-by-hop: the
  // upstream reads exactly the body sandgate judged, and nothing after it as another request.
  if (meter) {
    req.erase(http::field::transfer_encoding);
    req.content_length(meter->body().size());
  }
  RequestCredentials& creds = route.credentials();
  if (auto refusal = creds.apply(req, route.target().name, Route::kIntercepted, decision, log)) {
    co_await route.refuse(log, *refusal);
    co_return false;
  }
  // From here the head may carry the injected credential (a header, the query).
  CleanseOnExit cleanseHead{req};

  // A reused upstream connection may have been closed by the upstream a moment ago: a request
  // without a body that fails on one before any response byte is sent again on a new one.
  const bool bodyless = parser.is_done();
  // A chunked body's framing is judged byte by byte as it arrives, starting with what came
  // with the head: a malformed one found here never reaches the upstream.
  ChunkedFraming framing;
  RequestBodyGuard guard{.watchUpstream = !bodyless, .judgedBody = {}};
  if (meter) guard.judgedBody = meter->body();
  if (!bodyless && parser.chunked()) {
    guard.framing = &framing;
    const auto buffered = route.clientBuffer().data();
    framing.feed(std::string_view(static_cast<const char*>(buffered.data()), buffered.size()));
    if (framing.status() == ChunkedFraming::Status::kError) {
      Refusal refusal = framingRefusal(framing.reason(), framing.detail(), rec);
      co_await route.refuse(log, refusal);
      co_return false;
    }
  }
  // The upstream answered before the whole body was sent (kEarlyAnswer): the rest of the body
  // stays unsent and unread, so neither connection carries another request.
  bool earlyAnswer = false;
  std::optional<ResponseParser> rp;
  beast::error_code headError;
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = false;
    if (auto refusal = co_await route.acquire(decision, log, attempt == 0, reused)) {
      co_await route.refuse(log, *refusal);
      co_return false;
    }
    rec.kind = Route::kKind;
    if (expectContinue && !bodyless && clientVersion == 11 && !sentContinue) {
      if (!co_await sendContinue(route.client(), limits)) {
        route.dropUpstream();
        co_return false;
      }
      sentContinue = true;
    }
    route.prepareSend(req);
    http::request_serializer<http::buffer_body> sr(req);
    auto sent = co_await relayMessage(route.client(), route.clientBuffer(), parser,
                                      route.upstream(), sr, nullptr, limits.bodyTimeout,
                                      limits.bodyTimeout, rec.bytesUp, nullptr, &guard);
    if (meter && sent.headSent) meter->requestSent();
    if (sent.error == RelayError::kFraming) {
      // The upstream has a part of a body that never ends: it is dropped with its connection.
      route.dropUpstream();
      Refusal refusal = framingRefusal(sent.reason, sent.detail, rec);
      co_await route.refuse(log, refusal);
      co_return false;
    }
    // A write that failed after the head went out may be the upstream answering and closing
    // without reading the body: its answer is read like an early one.
    earlyAnswer = sent.error == RelayError::kEarlyAnswer ||
                  (sent.error == RelayError::kWrite && sent.headSent && !bodyless &&
                   peerHasSpoken(route.upstream()));
    if (sent.error == RelayError::kRead) {
      route.dropUpstream();
      noteClientReadFailure(sent, rec);
      finishRequest(c, log);
      co_return false;
    }
    if (sent.error == RelayError::kWrite && !earlyAnswer) {
      route.dropUpstream();
      if (reused && bodyless) continue;
      Refusal refusal = upstreamSendRefusal(sent, rec);
      co_await route.refuse(log, refusal);
      co_return false;
    }
    headError = co_await readResponseHead(route.upstream(), route.upstreamBuffer(), rp,
                                          req.method() == http::verb::head, limits.maxHeaderBytes,
                                          limits.idleTimeout);
    if (headError && reused && bodyless && isPeerClosed(headError) &&
        route.upstreamBuffer().size() == 0) {
      route.dropUpstream();
      continue;
    }
    break;  // the second attempt is on a new connection (never reused)
  }
  if (!headError) {
    if (auto refusal = route.checkResponse(*rp)) {
      route.dropUpstream();  // its body was not read
      co_await route.refuse(log, *refusal);
      co_return false;
    }
  }
  // A 101 that was not asked for (or not for websocket) is refused like a broken response.
  const bool switched = !headError && rp->get().result_int() == 101;
  if (headError || (switched && !(websocket && upgradesToWebsocket(rp->get())))) {
    route.dropUpstream();
    UpstreamResponseFailure f{headError == beast::error::timeout,
                              headError && isPeerClosed(headError),
                              headError ? headError.message() : std::string()};
    Refusal refusal = upstreamResponseRefusal(f, task.name, rec.host, rec.rule, rec.upstream);
    co_await route.refuse(log, refusal);
    co_return false;
  }
  rec.verdict = outcomeOf(decision.verdict);
  rec.reason = decision.reason;
  if constexpr (Route::kRelaysWebsocket) {
    if (switched) {
      co_await route.switchProtocols(log, *rp);
      co_return false;
    }
  }

  auto& res = rp->get();
  const bool upstreamKeepAlive = res.keep_alive();
  stripHopByHop(res);
  std::optional<broker::Scrubber> scrubber;
  std::unique_ptr<broker::BodyDecoder> decoder;
  if (auto refusal = creds.scrubHeaders(res, !rp->is_done(), log, scrubber, decoder)) {
    route.dropUpstream();  // its body was not read
    co_await route.refuse(log, *refusal);
    co_return false;
  }
  if (meter) {
    auto type = res.find(http::field::content_type);
    const std::string_view mime =
        type == res.end() ? std::string_view() : std::string_view(type->value());
    meter->responseStarted(res.result_int(),
                           iequals(trimOws(mime.substr(0, mime.find(';'))), "text/event-stream"));
  }
  // A body scrubbed with replacements of another length, decoded, or without the usage chunk
  // sandgate asked for, changes length: frame it ourselves.
  const bool keepAlive = frameResponse(
      *rp, clientVersion, clientKeepAlive && !earlyAnswer,
      decoder || (scrubber && !scrubber->preservesLength()) || (meter && meter->changesLength()));
  rec.status = res.result_int();

  auto back = co_await relayResponse(route.upstream(), route.upstreamBuffer(), *rp, route.client(),
                                     scrubber ? &*scrubber : nullptr, limits, rec, decoder.get(),
                                     meter ? &*meter : nullptr);
  creds.countScrubs(scrubber);
  if (back.error == RelayError::kDecode && !back.headSent) {
    // Nothing has reached the client yet: it gets the refusal instead of a cut response.
    route.dropUpstream();
    Refusal refusal = undecodableBodyRefusal(back, rec);
    co_await route.refuse(log, refusal);
    co_return false;
  }
  if (meter) meter->settle();
  budgets.settle();
  finishRequest(c, log);
  // A response cut short after its head went out must not end like a whole one.
  if (back.error != RelayError::kNone && back.headSent) abortConnection(c);
  // The upstream connection is reused only when both messages ended cleanly and nothing else
  // arrived: leftover bytes (or a half-read body, when the client went away) would be read as
  // the next request's response.
  // An upstream that answers a request with a body with an error (401, 413, 417, ...) may not
  // have read that body, and would then take it for the start of the next request: such a
  // connection is not reused either.
  const bool bodyMayBeUnread = earlyAnswer || (!bodyless && rec.status >= 400);
  route.upstreamDone(back.error == RelayError::kNone && !bodyMayBeUnread && upstreamKeepAlive &&
                     rp->is_done() && !rp->need_eof() && parser.is_done() &&
                     route.upstreamBuffer().size() == 0);
  if (back.error != RelayError::kNone) co_return false;
  co_return keepAlive&& parser.is_done() && !c.state.draining.load(std::memory_order_relaxed);
}

}  // namespace sandgate::proxy
