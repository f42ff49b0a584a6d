// Captured connections: local address → name → the ordinary CONNECT / forward paths.
#include "proxy/session/transparent.h"

#include <fmt/format.h>

#include "policy/host.h"
#include "proxy/capture_server/capture.h"
#include "proxy/tunnel/connect.h"
#include "proxy/upstream/upstream.h"

namespace sandgate::proxy {

namespace asio = boost::asio;

std::optional<CapturedTarget> capturedTarget(ClientConnection& c) {
  boost::system::error_code ec;
  auto local = c.stream.socket().local_endpoint(ec);
  CapturedTarget t;
  t.local = ec ? std::string("unknown") : endpointText(local);
  std::optional<std::string> name;
  if (!ec) name = c.listener->capture->pool().nameOf(toIpAddress(local.address()));
  if (!name) {
    RequestLog log;
    log.record.time = std::chrono::system_clock::now();
    log.record.client = c.client;
    log.record.listener = t.local;
    log.record.mode = "transparent";
    log.record.task = c.task ? c.task->name : std::string();
    log.record.kind = audit_kind::kRefusal;
    log.record.port = ec ? 0 : local.port();
    log.record.verdict = Outcome::kDeny;
    log.record.reason = reason::kNotSynthetic;
    log.record.error = "no name was given out for this address";
    finishRequest(c, log);
    return std::nullopt;
  }
  t.name = std::move(*name);
  t.port = local.port();
  t.http = t.port == kCapturedHttpPort;
  return t;
}

asio::awaitable<void> handleCapturedStream(ClientConnection& c, const CapturedTarget& t,
                                           RequestLog& log) {
  RequestHead head;
  head.method = "CONNECT";
  head.form = TargetForm::kAuthority;
  head.host = t.name;
  head.port = t.port;
  log.record.host = t.name;
  log.record.port = t.port;
  co_await handleConnect(c, head, 0, log);
}

std::optional<Refusal> capturedHttpHead(const CapturedTarget& t, RequestHead* head) {
  auto refusal = [&](std::string_view why, std::string detail) {
    return Refusal{.status = 400, .reason = why, .host = t.name, .detail = std::move(detail)};
  };
  if (head->form != TargetForm::kOrigin) {
    return refusal(reason::kBadTarget,
                   "a captured connection carries origin-form requests (GET /path)");
  }
  if (!head->hostField) return refusal(reason::kHostMismatch, "the request has no Host field");
  // Host must name what the address was given for: "name" or "name:port".
  const std::string_view h = *head->hostField;
  policy::Target target;
  target.name = t.name;
  if (!policy::matchesTarget(h, target, t.port, kCapturedHttpPort)) {
    return refusal(
        reason::kHostMismatch,
        fmt::format("Host '{}' is not '{}', the name this address was given for", h, t.name));
  }
  head->form = TargetForm::kAbsolute;
  head->host = t.name;
  head->port = t.port;
  return std::nullopt;
}

}  // namespace sandgate::proxy
