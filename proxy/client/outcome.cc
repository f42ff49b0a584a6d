// The end of every request: its audit line and metrics, and the refusal that ends it (see
// client_connection.h).
#include <fmt/format.h>
#include <openssl/rand.h>

#include <boost/asio/write.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <random>

#include "policy/engine.h"
#include "policy/host.h"
#include "proxy/client/client_connection.h"
#include "proxy/identity/task_token.h"
#include "proxy/net/tls_channel.h"
#include "proxy/observe/listener_tally.h"
#include "proxy/observe/metrics.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
using asio::ip::tcp;

void noteCutHead(AuditRecord& rec, HeadStatus how, size_t bytes) {
  const bool timedOut = how == HeadStatus::kTimeout;
  if (rec.kind.empty()) rec.kind = audit_kind::kRefusal;
  rec.verdict = timedOut ? Outcome::kDeny : Outcome::kError;
  rec.reason = timedOut ? reason::kClientTimeout : reason::kClientClosed;
  rec.error = fmt::format("the client {} after {} byte(s) of a request head",
                          timedOut ? "sent no more in time" : "closed the connection", bytes);
}

std::string newConnectionId() {
  thread_local std::mt19937_64 gen = [] {
    uint64_t seed = 0;
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&seed), sizeof seed) != 1) {
      seed = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
    }
    return std::mt19937_64(seed);
  }();
  return fmt::format("{:016x}", gen());
}

void identifyRequest(ClientConnection& c, RequestLog& log) {
  auto& r = log.record;
  if (!r.requestId.empty()) return;
  r.connectionId = c.id;
  r.requestId = fmt::format("{}-{}", c.id, ++c.requestsSeen);
  if (c.listener) r.run = c.listener->run;
}

void finishRequest(ClientConnection& c, RequestLog& log) {
  identifyRequest(c, log);
  auto& r = log.record;
  r.durationSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - log.start).count();
  if (c.transparent) r.mode = "transparent";
  // Refusals before identity (407, 400) are counted under the empty task label: the name a
  // client claims is not trusted, and it would make the label unbounded.
  if (!c.metrics && c.state.metrics) c.metrics = c.state.metrics->task("");
  if (c.metrics) {
    const std::string_view kind = r.kind == audit_kind::kRefusal
                                      ? (r.method == "CONNECT" ? "tunnel" : "forward")
                                      : std::string_view(r.kind);
    const std::string_view verdict = outcomeName(r.verdict);
    if (r.kind == audit_kind::kTunnel || r.kind == audit_kind::kWebsocket) {
      // An established tunnel: its life is not a latency. A spliced CONNECT or a WebSocket
      // upgrade is one request of the client's; an intercepted CONNECT's requests were
      // counted each on its own, so it adds a request only when it ended as a refusal.
      const std::string_view mode = r.kind == audit_kind::kWebsocket ? "websocket"
                                    : log.intercepted                ? "intercepted"
                                                                     : "spliced";
      c.metrics->tunnelEnded(mode, verdict, r.reason, r.durationSeconds);
      const bool served = r.verdict == Outcome::kAllow || r.verdict == Outcome::kAudit ||
                          r.verdict == Outcome::kLearn;
      if (!log.intercepted || !served) {
        c.metrics->request(kind, verdict, r.reason);
      }
    } else {
      c.metrics->request(kind, verdict, r.reason, r.durationSeconds);
    }
    if (r.bytesUp) c.metrics->bytesUp(r.bytesUp);
    if (r.bytesDown) c.metrics->bytesDown(r.bytesDown);
    // An LLM call: what it was charged (its audit line's "llm"), or why sandgate answered it.
    if (r.llm) {
      const std::string_view outcome = r.llm->usage == "reported"  ? "ok"
                                       : r.llm->usage == "reserve" ? "no_usage"
                                                                   : "upstream_error";
      c.metrics->llmCall(r.llm->model, outcome, r.llm->inputTokens, r.llm->outputTokens,
                         r.llm->spendMicros);
    } else if (log.llmCall && r.status >= 400) {
      c.metrics->llmRefusal(r.reason);
    }
  }
  // Counted first, written second: whoever has seen a request's audit line (an operator, an
  // alert's test, the tests) finds it in the metrics too.
  if (c.state.audit) c.state.audit->write(r);
  if (c.listener && c.listener->tally) c.listener->tally->add(r);
}

std::optional<Refusal> refreshSnapshot(ClientConnection& c, bool* changed) {
  *changed = false;
  auto current = c.state.snapshot.load();
  if (current == c.snap) return std::nullopt;
  if (c.task && !c.ownTask) {
    const TaskEntry* task = current->findTask(c.task->name);
    if (!task) {
      return Refusal{.status = 403,
                     .reason = reason::kRevokedByReload,
                     .task = c.task->name,
                     .detail = fmt::format("a reload removed the task '{}' from the configuration",
                                           c.task->name),
                     .hint = "open a new connection as a task that is in the configuration"};
    }
    c.task = task;
  }
  c.snap = std::move(current);
  *changed = true;
  return std::nullopt;
}

LiveTunnel::LiveTunnel(ClientConnection& c, const policy::Target& target, uint16_t port,
                       int upstreamFd)
    : c_(c) {
  LiveTunnels::Entry e;
  e.fd = c.stream.socket().native_handle();
  e.upstreamFd = upstreamFd;
  e.task = c.task->name;
  e.adhocPolicy = c.task->adhocPolicy;
  e.tokenHosts = c.tokenHosts;
  e.target = target;
  e.port = port;
  e.revoked = &revoked_;
  e.why = &why_;
  e.reason = &reason_;
  if (c.token && c.snap->tokens) {
    e.token = c.token;
    e.tokenDeadline = c.tokenExp + c.snap->tokens->leeway();
  }
  id_ = c.state.liveTunnels.add(std::move(e));
}

LiveTunnel::~LiveTunnel() { c_.state.liveTunnels.remove(id_); }

void LiveTunnel::noteEnd(AuditRecord& rec) const {
  if (!revoked_.load(std::memory_order_acquire)) return;
  rec.verdict = Outcome::kDeny;
  rec.reason = reason_.empty() ? reason::kRevokedByReload : reason_;
  rec.error = why_;
}

std::optional<Refusal> recheckToken(const ClientConnection& c) {
  if (!c.token) return std::nullopt;
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  Refusal r{.status = 407,
            .task = c.task ? c.task->name : std::string(),
            .hint = "mint a new token for the task and open a new connection"};
  if (!c.snap->tokens) {
    r.reason = token_reason::kUnknownKey;
    r.detail = "the configuration no longer has a tokens: section";
    return r;
  }
  // reveal(): the token goes only into the verifier (a hash lookup, then its claims).
  TokenCheck check = c.snap->tokens->verify(c.token->reveal(), now);
  if (check.ok()) return std::nullopt;
  r.reason = check.reason;
  r.detail = std::move(check.detail);
  return r;
}

std::optional<policy::Target> requestTarget(std::string_view host, const AuditRecord& rec,
                                            Refusal* refusal) {
  auto normalized = policy::normalizeHost(host);
  if (auto* target = std::get_if<policy::Target>(&normalized)) return std::move(*target);
  *refusal = Refusal{.status = 400,
                     .reason = policy::reason::kInvalidHost,
                     .host = rec.host,
                     .detail = std::get<policy::HostError>(normalized).message};
  return std::nullopt;
}

void abortConnection(ClientConnection& c) {
  c.abortive = true;
  boost::system::error_code ignored;
  c.stream.socket().set_option(asio::socket_base::linger(true, 0), ignored);
}

policy::Decision decideRequest(const ClientConnection& c, const policy::Request& req) {
  policy::Decision d = c.snap->decide(*c.task, req);
  if (!d.allowed() || !c.tokenHosts) return d;
  const auto& hosts = *c.tokenHosts;
  if (std::find(hosts.begin(), hosts.end(), req.target.name) != hosts.end()) return d;
  policy::Decision refused;
  refused.port = d.port;
  refused.policy = d.policy;
  refused.verdict = policy::Verdict::kDeny;
  refused.reason = reason::kDeniedByToken;
  std::string names;
  for (const auto& h : hosts) names += (names.empty() ? "" : ", ") + h;
  refused.detail = fmt::format("this connection's task token allows only {}",
                               names.empty() ? std::string("no host") : names);
  return refused;
}

namespace {

asio::awaitable<void> sendRefusal(ClientConnection& c, RequestLog& log, std::string bytes) {
  c.stream.expires_after(toDuration(c.limits().bodyTimeout));
  // A captured TLS stream never asked a proxy anything: an HTTP page would only be noise in
  // its handshake, so the refusal is the close (and the audit line says why).
  if (!c.silentRefusals) co_await asio::async_write(c.stream, asio::buffer(bytes), kUse);
  boost::system::error_code ignored;
  c.stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  finishRequest(c, log);
}

}  // namespace

Refusal recordRefusal(ClientConnection& c, RequestLog& log, const Refusal& refusal) {
  identifyRequest(c, log);
  Refusal r = refusal;
  // One status per reason, wherever the refusal was built: the catalogue's (README's table).
  if (const int status = reasonStatus(r.reason); status > 0) r.status = status;
  r.requestId = log.record.requestId;
  if (r.task.empty() && c.task) r.task = c.task->name;
  auto& rec = log.record;
  if (rec.task.empty()) rec.task = r.task;
  if (rec.kind.empty()) rec.kind = audit_kind::kRefusal;
  rec.verdict = r.outcome;
  rec.reason = r.reason;
  rec.status = r.status;
  if (rec.rule.empty()) rec.rule = r.rule;
  if (rec.error.empty() && r.outcome == Outcome::kError) rec.error = r.detail;
  if (r.budget) rec.budget = r.budget;
  return r;
}

namespace {

// Inside TLS the client always gets the page: it spoke HTTP to sandgate's certificate.
asio::awaitable<void> sendRefusalInside(ClientConnection& c, TlsChannel& tls, RequestLog& log,
                                        std::string bytes) {
  boost::beast::get_lowest_layer(tls).expires_after(toDuration(c.limits().bodyTimeout));
  co_await tls.write(asio::const_buffer(bytes.data(), bytes.size()));
  finishRequest(c, log);
}

}  // namespace

// Not a coroutine itself, and the refusal is taken by reference: GCC 12 destroyed a
// class-type temporary (or by-value argument) of a co_await full-expression twice
// ("free(): invalid pointer"). Call sites therefore name their Refusal before co_await.
asio::awaitable<void> refuse(ClientConnection& c, RequestLog& log, const Refusal& refusal) {
  return sendRefusal(c, log, renderRefusal(recordRefusal(c, log, refusal)));
}

asio::awaitable<void> refuse(ClientConnection& c, TlsChannel& tls, RequestLog& log,
                             const Refusal& refusal) {
  return sendRefusalInside(c, tls, log, renderRefusal(recordRefusal(c, log, refusal)));
}

Refusal policyRefusal(const policy::Decision& d, const std::string& task, const std::string& host,
                      std::string_view hint) {
  return Refusal{.status = 403,
                 .reason = d.reason,
                 .task = task,
                 .host = host,
                 .rule = d.rule,
                 .detail = d.detail,
                 .hint = std::string(hint)};
}

asio::awaitable<TaskSlot> acquireTunnelSlot(ClientConnection& c, RequestLog& log) {
  const TaskEntry& task = *c.task;
  if (task.state->tryAcquireTunnel(task.limits.maxTunnels)) {
    TaskSlot slot(task.state, TaskSlot::Kind::kTunnel, c.metrics);
    co_return slot;
  }
  Refusal refusal{.status = 429,
                  .reason = reason::kTunnelLimit,
                  .task = task.name,
                  .host = log.record.host,
                  .detail = fmt::format("the task already has {} tunnels", task.limits.maxTunnels),
                  .hint = "raise limits.max_tunnels for the task"};
  co_await refuse(c, log, refusal);
  co_return TaskSlot();
}

asio::awaitable<bool> sendEstablished(ClientConnection& c, RequestLog& log,
                                      const policy::Decision& decision) {
  static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";
  auto& rec = log.record;
  rec.kind = audit_kind::kTunnel;
  rec.status = 200;
  rec.verdict = outcomeOf(decision.verdict);
  rec.reason = decision.reason;
  c.stream.expires_after(toDuration(c.limits().bodyTimeout));
  // A captured connection (transparent mode) sent no CONNECT: there is nothing to confirm.
  if (c.transparent) co_return true;
  if (auto [ec, n] = co_await asio::async_write(c.stream, asio::buffer(kEstablished), kUse); ec) {
    rec.error = ec.message();
    finishRequest(c, log);
    co_return false;
  }
  co_return true;
}

}  // namespace sandgate::proxy
