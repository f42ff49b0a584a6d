// A client connection: read each request head (bounded, strict), establish who the client
// is, apply per-task admission limits, and dispatch to forwarding or CONNECT.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/write.hpp>

#include "broker/secret.h"
#include "budget/counter.h"
#include "policy/engine.h"
#include "proxy/client/client_connection.h"
#include "proxy/client/head_reader.h"
#include "proxy/forward/forward.h"
#include "proxy/identity/proxy_auth.h"
#include "proxy/identity/task_token.h"
#include "proxy/observe/listener_tally.h"
#include "proxy/observe/metrics.h"
#include "proxy/session/token_task.h"
#include "proxy/session/transparent.h"
#include "proxy/state/redis/redis_counter.h"
#include "proxy/state/redis/waiting_threads.h"
#include "proxy/tunnel/connect.h"
#include "proxy/upstream/upstream.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using asio::ip::tcp;

namespace {

// Reads until c.buffer holds a complete head, within the head limit and deadline.
asio::awaitable<HeadRead> readHead(ClientConnection& c) {
  const auto& limits = c.limits();
  c.stream.expires_after(toDuration(limits.headerTimeout));
  return readRequestHead(c.buffer, limits.maxHeaderBytes,
                         [&c](auto into) { return c.stream.async_read_some(into, kUse); });
}

// Registers the connection as idle (closable at shutdown) while it waits for a head.
class IdleMark {
 public:
  IdleMark(Worker& w, tcp::socket* s) : w_(w), s_(s) { w_.idle.insert(s_); }
  ~IdleMark() { w_.idle.erase(s_); }
  IdleMark(const IdleMark&) = delete;
  IdleMark& operator=(const IdleMark&) = delete;

 private:
  Worker& w_;
  tcp::socket* s_;
};

Refusal rateLimited(const TaskEntry& task) {
  return Refusal{.status = 429,
                 .reason = reason::kRateLimited,
                 .task = task.name,
                 .detail = "too many new connections per second for this task",
                 .hint = "raise limits.new_connections_per_second for the task"};
}

// The counters of `state.redis`, which then hold every task's new-connection rate (shared by
// the replicas: each one's own limiter would admit the rate once per replica); null without.
// The snapshot's counter is the Redis one inside wrappers (the budget gauges' ObservedCounter,
// the leases' LeasedCounter): looking at the outer one only would find no Redis counter and
// fall back to this replica's own limiter, the very thing state.redis is there to prevent.
redis::RedisCounter* sharedRate(const ClientConnection& c) {
  for (budget::Counter* counter = c.snap->budgetCounter.get(); counter;
       counter = counter->wraps()) {
    if (auto* shared = dynamic_cast<redis::RedisCounter*>(counter)) return shared;
  }
  return nullptr;
}

// Admission of a connection for its task: the rate of new connections (here, unless it is
// shared: then takeSharedRate() right after), then the number of concurrent ones. Returns the
// refusal reason, if any.
std::optional<Refusal> admit(ClientConnection& c, const TaskEntry& task) {
  c.task = &task;
  c.metrics = c.state.metrics ? c.state.metrics->task(task.seriesName()) : nullptr;
  if (!sharedRate(c) && !task.state->tryTakeConnectionToken(task.limits.newConnectionsPerSecond,
                                                            std::chrono::steady_clock::now())) {
    return rateLimited(task);
  }
  if (!task.state->tryAcquireConnection(task.limits.maxConnections)) {
    return Refusal{
        .status = 429,
        .reason = reason::kConnectionLimit,
        .task = task.name,
        .detail = fmt::format("the task already has {} connections", task.limits.maxConnections),
        .hint = "raise limits.max_connections for the task"};
  }
  c.connectionSlot = TaskSlot(task.state, TaskSlot::Kind::kConnection);
  if (c.metrics) c.metrics->connectionOpened();
  return std::nullopt;
}

// A newly admitted connection against its task's rate in Redis. The round trip runs off the
// worker (state/redis/waiting_threads.h); Redis unreachable is the state's fail mode: closed
// refuses (503 rate_limit_unavailable), open admits and audits budget_fail_open.
asio::awaitable<std::optional<Refusal>> takeSharedRate(ClientConnection& c, RequestLog& log) {
  redis::RedisCounter* counter = sharedRate(c);
  if (!counter || !c.task) co_return std::nullopt;
  struct Taken {
    budget::TakeResult result;
    bool guessed = false;
  };
  // The snapshot holds the counter until the answer is in, whatever a reload does meanwhile.
  // Named, not a temporary of the co_await expression: GCC 12 destroys such temporaries twice.
  auto take = [snap = c.snap, counter, task = c.task->name,
               rate = c.task->limits.newConnectionsPerSecond] {
    const uint64_t before = counter->failedOpen();
    budget::TakeResult r = counter->takeRate(task, rate);
    return Taken{r, counter->failedOpen() != before};
  };
  auto answer = redis::offWorker<Taken>(std::move(take));
  Taken taken = co_await std::move(answer);
  if (taken.guessed) {
    log.record.budgetFailOpen = true;
    if (c.metrics) c.metrics->budgetFailOpen();
  }
  using Status = budget::TakeResult::Status;
  if (taken.result.status == Status::kOver) co_return rateLimited(*c.task);
  if (taken.result.status == Status::kUnavailable) {
    co_return Refusal{.status = 503,
                      .reason = reason::kRateUnavailable,
                      .task = c.task->name,
                      .detail =
                          "the task's new-connection rate is shared through state.redis, "
                          "which cannot answer now, so the connection is refused",
                      .outcome = Outcome::kError};
  }
  co_return std::nullopt;
}

// The connection belongs to `task` from its first identified request on: a later request may
// not name another (task_mismatch); the first one is admitted against the task's limits.
// An ad-hoc task (`own`, made for its token) is kept alive by the connection.
std::optional<Refusal> bindTask(ClientConnection& c, const TaskEntry& task,
                                std::shared_ptr<const TaskEntry> own = nullptr) {
  if (c.task && (c.task->name != task.name || c.task->adhocPolicy != task.adhocPolicy)) {
    return Refusal{.status = 407,
                   .reason = reason::kTaskMismatch,
                   .detail = "one connection cannot change its task",
                   .hint = "open a new connection"};
  }
  if (c.task) return std::nullopt;
  c.ownTask = std::move(own);
  return admit(c, task);
}

// A 407 for a task token, with its reason: what is wrong with the token, never the token.
Refusal tokenRefusal(std::string_view why, std::string detail) {
  return Refusal{.status = 407,
                 .reason = why,
                 .detail = std::move(detail),
                 .hint = "mint a new token for the task (sandgate token issue)"};
}

// Identity by a task token (a JWT in the password): bound once per connection (again only when
// another token comes); its expiry and revocation are checked on every request.
std::optional<Refusal> identifyByToken(ClientConnection& c, const BasicCredentials& creds) {
  const auto& verifier = *c.snap->tokens;
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const TokenHash hash = tokenHashOf(creds.token);
  // The same token again on a keep-alive connection: its binding stands, but the token is
  // checked again under the snapshot current now, so expiry, a reload that removed its key
  // and a revocation of its jti refuse it on the next request, not the next connection.
  if (c.task && c.tokenHash && *c.tokenHash == hash) return recheckToken(c);
  TokenCheck check = verifier.verify(creds.token, now);
  if (!check.ok()) return tokenRefusal(check.reason, std::move(check.detail));
  boost::system::error_code ec;
  auto peer = c.stream.socket().remote_endpoint(ec);
  auto peerAddress = ec ? std::nullopt : policy::parseIp(peer.address().to_string());
  TokenTask bound = taskForToken(*c.snap, check.claims, creds.task, peerAddress, now);
  if (!bound.ok()) return tokenRefusal(bound.reason, std::move(bound.detail));
  if (auto r = bindTask(c, *bound.task, std::move(bound.own))) return r;
  c.tokenHash = hash;
  c.tokenExp = check.claims.exp;
  c.token = broker::Secret::copyOf(creds.token);
  c.tokenHosts = std::move(bound.hosts);
  return std::nullopt;
}

// Token identity: who does this request's Proxy-Authorization say the client is?
std::optional<Refusal> identify(ClientConnection& c, const RequestHead& head) {
  if (!head.proxyAuthorization) {
    return Refusal{.status = 407,
                   .reason = reason::kAuthRequired,
                   .detail = "proxy authentication required",
                   .hint = "use HTTPS_PROXY=http://TASK:TOKEN@host:port"};
  }
  auto creds = parseBasicAuth(*head.proxyAuthorization);
  if (creds && c.snap->tokens && looksLikeJwt(creds->token)) return identifyByToken(c, *creds);
  const TaskEntry* task = creds ? c.snap->findTask(creds->task) : nullptr;
  // Always hash and compare, so that timing does not tell which task names exist.
  static const TokenHash kNoToken{};
  bool ok = tokenMatches(creds ? creds->token : std::string_view(),
                         task && task->token ? *task->token : kNoToken) &&
            task && task->token;
  if (!ok) {
    return Refusal{.status = 407,
                   .reason = reason::kAuthInvalid,
                   .detail = "invalid proxy credentials",
                   .hint = "check the task name and token"};
  }
  if (auto r = bindTask(c, *task)) return r;
  return std::nullopt;
}

asio::awaitable<void> serve(ClientConnection& c) {
  if (c.listener->task) {
    RequestLog log;
    log.record.time = std::chrono::system_clock::now();
    log.record.client = c.client;
    log.record.listener = c.listener->name;
    log.record.task = *c.listener->task;
    const TaskEntry* task = c.snap->findTask(*c.listener->task);
    if (!task) {
      {
        Refusal refusal{.status = 403,
                        .reason = policy::reason::kUnknownTask,
                        .task = *c.listener->task,
                        .detail = "this listener's task is not in the configuration"};
        co_await refuse(c, log, refusal);
      }
      co_return;
    }
    std::optional<Refusal> r = admit(c, *task);
    if (!r) r = co_await takeSharedRate(c, log);
    if (r) {
      c.transparent = c.silentRefusals = c.listener->capture != nullptr;
      co_await refuse(c, log, *r);
      co_return;
    }
  }
  std::optional<CapturedTarget> captured;
  if (c.listener->capture) {
    c.transparent = true;
    captured = capturedTarget(c);
    if (!captured) co_return;
    // Every audit line of this connection names the synthetic address it reached (the
    // listener itself is a wildcard).
    c.listener = std::make_shared<const ListenerInfo>(
        ListenerInfo{captured->local, c.listener->task, c.listener->tally, c.listener->capture,
                     c.listener->placeholders, c.listener->run});
    if (!captured->http) {
      c.silentRefusals = true;
      RequestLog log;
      log.record.time = std::chrono::system_clock::now();
      log.record.client = c.client;
      log.record.listener = captured->local;
      log.record.task = c.task->name;
      co_await handleCapturedStream(c, *captured, log);
      co_return;
    }
  }
  while (true) {
    if (c.state.draining.load(std::memory_order_relaxed) && c.buffer.size() == 0) co_return;
    HeadRead hr;
    {
      IdleMark idle(c.worker, &c.stream.socket());
      hr = co_await readHead(c);
    }
    RequestLog log;
    log.record.time = std::chrono::system_clock::now();
    log.record.client = c.client;
    log.record.listener = captured ? captured->local : c.listener->name;
    if (c.task) log.record.task = c.task->name;
    switch (hr.status) {
      case HeadStatus::kComplete:
        break;
      case HeadStatus::kClosed:
      case HeadStatus::kTimeout:
        // A client that goes away or falls silent between requests is how a connection ends;
        // one that does so inside a request head is audited (nothing went upstream).
        if (c.buffer.size() > 0) {
          noteCutHead(log.record, hr.status, c.buffer.size());
          finishRequest(c, log);
        }
        co_return;
      case HeadStatus::kTooLarge: {
        Refusal refusal{
            .status = 431,
            .reason = reason::kHeaderTooLarge,
            .detail = fmt::format("request head exceeds {} bytes", c.limits().maxHeaderBytes),
            .hint = "limits.max_header_bytes"};
        co_await refuse(c, log, refusal);
      }
        co_return;
      case HeadStatus::kMalformed: {
        Refusal refusal{.status = 400,
                        .reason = reason::kBadRequestLine,
                        .detail = "bare CR or LF in the request head"};
        co_await refuse(c, log, refusal);
      }
        co_return;
    }
    // Numbered as it comes: a CONNECT's own line, written when its tunnel ends, keeps the
    // number before those of the requests inside it.
    identifyRequest(c, log);
    // Each request is decided against the configuration current when it comes, not the one
    // the connection started with: a reload revokes what it no longer allows at once.
    bool reloaded = false;
    if (auto r = refreshSnapshot(c, &reloaded)) {
      co_await refuse(c, log, *r);
      co_return;
    }
    if (reloaded) c.forwardCredentials.reset();  // made from the old snapshot's credentials
    std::string_view raw(static_cast<const char*>(c.buffer.data().data()), hr.length);
    RequestHead head;
    if (auto e = validateRequestHead(raw, &head)) {
      log.record.method = std::string(head.method);
      {
        Refusal refusal{.status = 400, .reason = e->reason, .detail = e->detail};
        co_await refuse(c, log, refusal);
      }
      co_return;
    }
    log.record.method = std::string(head.method);
    log.record.host = std::string(head.host);
    log.record.port = head.port;
    if (captured) {
      log.record.host = captured->name;
      log.record.port = captured->port;
      if (auto r = capturedHttpHead(*captured, &head)) {
        co_await refuse(c, log, *r);
        co_return;
      }
      if (!co_await handleForward(c, head, hr.length, log)) co_return;
      continue;
    }
    if (!c.listener->task) {
      const bool wasBound = c.task != nullptr;
      std::optional<Refusal> r = identify(c, head);
      if (!r && !wasBound) r = co_await takeSharedRate(c, log);  // admitted just now
      if (r) {
        r->host = log.record.host;
        co_await refuse(c, log, *r);
        co_return;
      }
      log.record.task = c.task->name;
    }
    if (head.form == TargetForm::kOrigin || head.form == TargetForm::kAsterisk) {
      {
        Refusal refusal{.status = 400,
                        .reason = reason::kNotProxyRequest,
                        .detail = "sandgate is a proxy: send absolute-form http:// URIs or CONNECT",
                        .hint = "set HTTP_PROXY/HTTPS_PROXY"};
        co_await refuse(c, log, refusal);
      }
      co_return;
    }
    if (head.form == TargetForm::kAuthority) {
      co_await handleConnect(c, head, hr.length, log);
      co_return;
    }
    if (!co_await handleForward(c, head, hr.length, log)) co_return;
  }
}

}  // namespace

asio::awaitable<void> runSession(Worker& worker, ServerState& state, tcp::socket socket,
                                 std::shared_ptr<const ListenerInfo> listener) {
  state.activeSessions.fetch_add(1, std::memory_order_relaxed);
  ClientConnection c(worker, state, std::move(socket));
  c.snap = state.snapshot.load();
  c.listener = std::move(listener);
  boost::system::error_code ec;
  auto peer = c.stream.socket().remote_endpoint(ec);
  c.client = ec ? "unknown" : endpointText(peer);
  try {
    co_await serve(c);
  } catch (const std::exception& e) {
    // Only resource exhaustion (bad_alloc) or a bug gets here; this connection ends, the
    // process keeps serving everyone else.
    spdlog::error("session {}: {}", c.client, e.what());
  }
  if (c.metrics && c.connectionSlot) c.metrics->connectionClosed();
  c.stream.socket().close(ec);
  state.activeSessions.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace sandgate::proxy
