// CONNECT: policy on host and port, the task's budgets, resolve + vet + dial, 200, the
// ClientHello's SNI check on port 443, then the tunnel. The bytes the client sent after the CONNECT
// head go first.
#include "proxy/tunnel/connect.h"

#include <fmt/format.h>

#include <boost/asio/write.hpp>

#include "policy/host.h"
#include "proxy/client/client_connection.h"
#include "proxy/exchange/budget_gate.h"
#include "proxy/client/ask.h"
#include "proxy/intercept/intercept.h"
#include "proxy/net/tunnel.h"
#include "proxy/ssh/ssh_broker.h"
#include "proxy/tunnel/tls_client_hello.h"
#include "proxy/upstream/upstream.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using asio::ip::tcp;

namespace {

constexpr uint16_t kHttpsPort = 443;

enum class HelloCheck { kOk, kMismatch, kNotTls, kMalformed, kTimeout, kClosed };

// Reads (into c.buffer) until the ClientHello is complete, then compares its SNI with the
// CONNECT host. A hello without SNI passes: the upstream's certificate check is the client's.
asio::awaitable<HelloCheck> checkClientHello(ClientConnection& c, const policy::Target& target,
                                             std::string* detail) {
  c.stream.expires_after(toDuration(c.limits().headerTimeout));
  while (true) {
    auto data = c.buffer.data();
    auto hello =
        parseClientHello(std::string_view(static_cast<const char*>(data.data()), data.size()));
    switch (hello.status) {
      case ClientHello::Status::kNeedMore:
        break;
      case ClientHello::Status::kNotTls:
        *detail = hello.error;
        co_return HelloCheck::kNotTls;
      case ClientHello::Status::kMalformed:
        *detail = hello.error;
        co_return HelloCheck::kMalformed;
      case ClientHello::Status::kOk: {
        if (!hello.sni) co_return HelloCheck::kOk;
        if (!policy::namesTarget(*hello.sni, target)) {
          *detail = fmt::format("TLS server name '{}' is not the CONNECT host '{}'", *hello.sni,
                                target.name);
          co_return HelloCheck::kMismatch;
        }
        co_return HelloCheck::kOk;
      }
    }
    size_t room = kMaxClientHelloBytes - std::min(kMaxClientHelloBytes, data.size());
    if (room == 0) co_return HelloCheck::kMalformed;
    auto [ec, n] = co_await c.stream.async_read_some(c.buffer.prepare(room), kUse);
    c.buffer.commit(n);
    if (ec == beast::error::timeout) co_return HelloCheck::kTimeout;
    if (ec) co_return HelloCheck::kClosed;
  }
}

}  // namespace

asio::awaitable<void> handleConnect(ClientConnection& c, const RequestHead& head, size_t headLen,
                                    RequestLog& log) {
  auto& rec = log.record;
  const auto& limits = c.limits();
  const TaskEntry& task = *c.task;
  // What followed the head is not read or forwarded unless the CONNECT is allowed.
  c.buffer.consume(headLen);

  Refusal hostRefusal;
  const auto normalized = requestTarget(head.host, rec, &hostRefusal);
  if (!normalized) {
    co_await refuse(c, log, hostRefusal);
    co_return;
  }
  const policy::Target& target = *normalized;
  rec.host = target.name;

  policy::Request preq{target, head.port, std::nullopt, std::nullopt, std::nullopt};
  auto decision = decideRequest(c, preq);
  if (decision.askable) {
    // on_unknown: ask: the CONNECT waits for an operator; an approved tunnel carries the answer
    // to the requests intercepted inside it.
    auto asking = askOperator(c, preq, std::move(decision), log);  // named: GCC 12
    decision = co_await std::move(asking);
    if (decision.approved) c.tunnelApproval = rec.approval;
  }
  rec.rule = decision.rule;
  if (!decision.allowed()) {
    {
      Refusal refusal = policyRefusal(decision, task.name, rec.host,
                                      "ask for a policy rule that allows this host");
      co_await refuse(c, log, refusal);
    }
    co_return;
  }
  // A rule whose credential is an SSH key: the broker serves SSH here (git over SSH), whatever
  // the port; the key never goes into a splice or an HTTP request.
  if (sshCredential(c, decision)) {
    co_await handleSshBroker(c, target, head.port, decision, log);
    co_return;
  }
  if (decision.intercept) {
    if (!c.state.interception) {
      {
        Refusal refusal{.status = 502,
                        .reason = reason::kInterceptionUnavailable,
                        .task = task.name,
                        .host = rec.host,
                        .rule = decision.rule,
                        .detail = "the rule needs TLS interception, which this server cannot do",
                        .outcome = Outcome::kError};
        co_await refuse(c, log, refusal);
      }
      co_return;
    }
    // The stream and the bytes already read (c.buffer) go over together.
    co_await handleIntercept(c, target, head.port, decision, log);
    co_return;
  }
  // A spliced tunnel is measured like a request: admitted against the task's budgets before it
  // is dialled, and settled with the bytes it carried when it ends (the gate's destructor). A
  // budget of bytes that tunnels escaped would let an allowed host carry what it refuses.
  BudgetGate budgets(c, log);
  if (auto refusal = co_await budgets.admitAsync(std::nullopt)) {
    co_await refuse(c, log, *refusal);
    co_return;
  }
  TaskSlot tunnelSlot = co_await acquireTunnelSlot(c, log);
  if (!tunnelSlot) co_return;

  Refusal dialRefusal;
  auto dialed = co_await dialForClient(c, decision, target, head.port, log, &dialRefusal);
  if (!dialed) {
    co_await refuse(c, log, dialRefusal);
    co_return;
  }
  tcp::socket upstream = std::move(*dialed);

  const bool established = co_await sendEstablished(c, log, decision);
  if (!established) co_return;

  if (head.port == kHttpsPort) {
    std::string detail;
    auto check = co_await checkClientHello(c, target, &detail);
    if (check != HelloCheck::kOk) {
      rec.verdict = Outcome::kDeny;
      rec.error = detail;
      switch (check) {
        case HelloCheck::kMismatch:
          rec.reason = reason::kSniMismatch;
          break;
        case HelloCheck::kNotTls:
          rec.reason = reason::kNotTls;
          break;
        case HelloCheck::kMalformed:
          rec.reason = reason::kBadClientHello;
          break;
        case HelloCheck::kTimeout:
          rec.reason = reason::kClientTimeout;
          break;
        default:
          rec.verdict = Outcome::kError;
          rec.reason = reason::kClientClosed;
          break;
      }
      budgets.settle();
      finishRequest(c, log);
      co_return;
    }
  }

  // Early bytes first (the ClientHello, or whatever followed the CONNECT head).
  if (c.buffer.size() > 0) {
    DeadlineStream up(std::move(upstream));
    up.expires_after(toDuration(limits.bodyTimeout));
    auto [ec, n] = co_await asio::async_write(up, c.buffer.data(), kUse);
    rec.bytesUp += n;
    c.buffer.consume(c.buffer.size());
    upstream = up.release_socket();
    if (ec) {
      rec.verdict = Outcome::kError;
      rec.reason = reason::kUpstreamReset;
      rec.error = ec.message();
      budgets.settle();
      finishRequest(c, log);
      co_return;
    }
  }
  c.stream.expires_never();
  // The head buffer is empty now (early bytes went upstream above); give its capacity back so
  // an idle tunnel costs only its sockets and coroutine frames.
  c.buffer.shrink_to_fit();
  auto idle = std::chrono::duration_cast<std::chrono::steady_clock::duration>(limits.idleTimeout);
  {
    LiveTunnel live(c, target, head.port, upstream.native_handle());
    auto result = co_await runTunnel(c.stream.socket(), upstream, idle);
    rec.bytesUp += result.bytesUp;
    rec.bytesDown += result.bytesDown;
    if (result.idleTimeout) {
      rec.error = "idle timeout";
      rec.reason = reason::kIdleTimeout;
    } else if (!result.error.empty()) {
      rec.error = result.error;
    }
    live.noteEnd(rec);
  }
  // Closed explicitly (a reset when the tunnel failed: see runTunnel), and only once the
  // tunnel is unregistered, so that a reload never shuts down a descriptor reused since.
  boost::system::error_code ignored;
  upstream.close(ignored);
  budgets.settle();
  finishRequest(c, log);
}

}  // namespace sandgate::proxy
