// Forwarding of absolute-form http:// requests: policy on host, port, method and path, a
// pooled upstream connection, hop-by-hop headers removed, and bodies streamed both ways
// through fixed buffers (never a whole body in memory). Credentials apply as inside an
// intercepted tunnel (request_credentials.h), except that a secret goes out in clear only
// for a credential with allow_plaintext: a placeholder sent to a host its credential does not
// name is refused, and a rule's credential that may not travel in clear fails the request
// rather than letting it leave without.
#include "proxy/forward/forward.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/write.hpp>

#include "broker/headers.h"
#include "policy/host.h"
#include "proxy/client/client_connection.h"
#include "proxy/exchange/git_gate.h"
#include "proxy/exchange/headers.h"
#include "proxy/exchange/relay.h"
#include "proxy/exchange/request_credentials.h"
#include "proxy/upstream/upstream.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

namespace {

bool iequals(std::string_view a, std::string_view b) { return beast::iequals(a, b); }

std::string originForm(std::string_view pathAndQuery) {
  if (pathAndQuery.empty()) return "/";
  if (pathAndQuery.front() == '?') return "/" + std::string(pathAndQuery);
  return std::string(pathAndQuery);
}

std::string hostHeader(std::string_view host, uint16_t port) {
  std::string h(host);
  if (port != 80) h += fmt::format(":{}", port);
  return h;
}

}  // namespace

asio::awaitable<bool> handleForward(ClientConnection& c, const RequestHead& head, size_t headLen,
                                    RequestLog& log) {
  auto& rec = log.record;
  rec.scheme = "http";
  rec.path = std::string(head.path);
  const auto& limits = c.limits();
  const TaskEntry& task = *c.task;

  auto normalized = policy::normalizeHost(head.host);
  if (auto* e = std::get_if<policy::HostError>(&normalized)) {
    {
      Refusal refusal{.status = 400,
                      .reason = policy::reason::kInvalidHost,
                      .host = rec.host,
                      .detail = e->message};
      co_await refuse(c, log, refusal);
    }
    co_return false;
  }
  const auto& target = std::get<policy::Target>(normalized);
  rec.host = target.name;

  http::request_parser<http::buffer_body> parser;
  parser.header_limit(static_cast<uint32_t>(std::min<uint64_t>(limits.maxHeaderBytes, UINT32_MAX)));
  parser.body_limit(boost::none);
  beast::error_code pec;
  size_t used = parser.put(asio::buffer(c.buffer.data().data(), headLen), pec);
  if (pec || used != headLen || !parser.is_header_done()) {
    {
      Refusal refusal{.status = 400,
                      .reason = reason::kBadHeader,
                      .host = rec.host,
                      .detail = fmt::format("malformed request head: {}", pec.message())};
      co_await refuse(c, log, refusal);
    }
    co_return false;
  }
  c.buffer.consume(headLen);
  auto& req = parser.get();
  const bool clientKeepAlive = req.keep_alive();
  const unsigned clientVersion = req.version();

  auto decision = decideHttpRequest(
      c, policy::Request{target, head.port, head.method, head.path, std::nullopt}, req);
  rec.rule = decision.rule;
  if (!decision.allowed()) {
    {
      Refusal refusal = policyRefusal(decision, task.name, rec.host,
                                      "ask for a policy rule that allows this request");
      co_await refuse(c, log, refusal);
    }
    co_return false;
  }

  bool sentContinue = false;
  if (decision.git) {
    const auto bodyTimeout = toDuration(limits.bodyTimeout);
    auto gate = co_await gateGitRequest(
        c, decision, head.pathAndQuery, parser, c.buffer, log,
        [&c, bodyTimeout](asio::mutable_buffer into) {
          c.stream.expires_after(bodyTimeout);
          return c.stream.async_read_some(into, kUse);
        },
        [&c, bodyTimeout](asio::const_buffer out) {
          c.stream.expires_after(bodyTimeout);
          return asio::async_write(c.stream, out, kUse);
        });
    if (gate.action == GitGateResult::Action::kRefuse) {
      co_await refuse(c, log, gate.refusal);
      co_return false;
    }
    if (gate.action == GitGateResult::Action::kAnswered) {
      rec.kind = audit_kind::kForward;
      finishRequest(c, log);
      co_return false;
    }
    sentContinue = gate.sentContinue;
  }

  // Prepare the upstream request.
  stripHopByHop(req);
  bool expectContinue = false;
  if (auto it = req.find(http::field::expect); it != req.end()) {
    // sandgate answers 100-continue itself once the upstream is connected; the upstream
    // then sees an ordinary request with a body.
    expectContinue = iequals(it->value(), "100-continue");
    req.erase(http::field::expect);
  }
  req.target(originForm(head.pathAndQuery));
  if (req.find(http::field::host) == req.end()) {
    req.set(http::field::host, hostHeader(head.host, head.port));
  }
  req.version(11);
  if (!c.forwardCredentials) c.forwardCredentials = std::make_shared<RequestCredentials>(c);
  RequestCredentials& creds = *c.forwardCredentials;
  if (auto refusal = creds.apply(req, target.name, false, decision, log)) {
    co_await refuse(c, log, *refusal);
    co_return false;
  }
  // From here the head may carry a secret (a header, the query).
  CleanseOnExit cleanseHead{req};

  const auto key = poolKey(c.snap->generation, task.name, target.name, head.port);
  std::optional<DeadlineStream> up;
  beast::flat_buffer upBuf;
  std::optional<http::response_parser<http::buffer_body>> rp;
  bool requestSent = false;
  // A pooled connection may have been closed by the upstream a moment ago; a request
  // without a body that fails on one before any response byte is retried once on a new one.
  for (int attempt = 0; attempt < 2 && !requestSent; ++attempt) {
    bool pooled = false;
    if (attempt == 0) {
      if (auto idle = c.worker.pool.take(key)) {
        up.emplace(std::move(idle->conn));
        rec.upstream = std::move(idle->upstream);
        pooled = true;
      }
    }
    if (!pooled) {
      Refusal dialRefusal;
      auto dialed = co_await dialForClient(c, decision, target, head.port, log, &dialRefusal);
      if (!dialed) {
        co_await refuse(c, log, dialRefusal);
        co_return false;
      }
      up.emplace(std::move(*dialed));
    }
    if (expectContinue && head.hasBody && clientVersion == 11 && !sentContinue) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      c.stream.expires_after(toDuration(limits.bodyTimeout));
      auto [ec, n] = co_await asio::async_write(c.stream, asio::buffer(kContinue), kUse);
      if (ec) co_return false;
      sentContinue = true;
    }
    http::request_serializer<http::buffer_body> sr(req);
    auto sent = co_await relayMessage(c.stream, c.buffer, parser, *up, sr, nullptr,
                                      limits.bodyTimeout, limits.bodyTimeout, rec.bytesUp);
    if (sent.error == RelayError::kRead) {
      rec.kind = audit_kind::kForward;
      noteClientReadFailure(sent, rec);
      finishRequest(c, log);
      co_return false;
    }
    if (sent.error == RelayError::kWrite) {
      if (pooled && !head.hasBody) continue;
      rec.kind = audit_kind::kForward;
      {
        Refusal refusal = upstreamSendRefusal(sent, rec);
        co_await refuse(c, log, refusal);
      }
      co_return false;
    }
    // A ws:// upgrade is not forwarded (stripHopByHop removed Upgrade): a 101 here was not
    // asked for and is refused below.
    auto rec_ec = co_await readResponseHead(*up, upBuf, rp, req.method() == http::verb::head,
                                            limits.maxHeaderBytes, limits.idleTimeout);
    if (rec_ec && pooled && !head.hasBody && isPeerClosed(rec_ec) && upBuf.size() == 0) {
      upBuf.clear();
      continue;
    }
    requestSent = true;
    if (rec_ec || rp->get().result_int() == 101) {
      rec.kind = audit_kind::kForward;
      UpstreamResponseFailure f{rec_ec == beast::error::timeout, rec_ec && isPeerClosed(rec_ec),
                                rec_ec ? rec_ec.message() : std::string()};
      Refusal r = upstreamResponseRefusal(f, task.name, rec.host, rec.rule, rec.upstream);
      co_await refuse(c, log, r);
      co_return false;
    }
  }

  // Response back to the client.
  auto& res = rp->get();
  const bool upstreamKeepAlive = res.keep_alive();
  stripHopByHop(res);
  std::optional<broker::Scrubber> scrubber;
  std::unique_ptr<broker::BodyDecoder> decoder;
  rec.kind = audit_kind::kForward;
  if (auto refusal = creds.scrubHeaders(res, !rp->is_done(), log, scrubber, decoder)) {
    co_await refuse(c, log, *refusal);  // the upstream connection is dropped
    co_return false;
  }
  // A body scrubbed with replacements of another length, or decoded, changes length: frame it
  // ourselves.
  const bool keepAlive = frameResponse(*rp, clientVersion, clientKeepAlive,
                                       decoder || (scrubber && !scrubber->preservesLength()));
  rec.verdict = outcomeOf(decision.verdict);
  rec.reason = decision.reason;
  rec.status = res.result_int();

  auto back = co_await relayResponse(*up, upBuf, *rp, c.stream, scrubber ? &*scrubber : nullptr,
                                     limits, rec, decoder.get());
  creds.countScrubs(scrubber);
  if (back.error == RelayError::kDecode && !back.headSent) {
    // Nothing has reached the client yet: it gets the refusal instead of a cut response.
    Refusal r = undecodableBodyRefusal(back, rec);
    co_await refuse(c, log, r);
    co_return false;
  }
  finishRequest(c, log);
  if (back.error != RelayError::kNone) co_return false;

  // Reuse the upstream connection only when both messages ended cleanly and nothing else
  // arrived: leftover bytes would be read as the next request's response.
  if (upstreamKeepAlive && rp->is_done() && !rp->need_eof() && parser.is_done() &&
      upBuf.size() == 0) {
    c.worker.pool.put(key, up->release_socket(), rec.upstream);
  }
  co_return keepAlive&& parser.is_done() && !c.state.draining.load(std::memory_order_relaxed);
}

}  // namespace sandgate::proxy
