// The Asio side of the SSH broker (see ssh_broker.h): admission (budgets, the task's tunnel
// slots and SSH sessions), resolve + vet + dial through upstream/, the 200, then the session on
// a thread of its own while the coroutine waits, and the audit lines from what it reports.
#include "proxy/ssh/ssh_broker.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "broker/store.h"
#include "policy/git_rules.h"
#include "proxy/exchange/budget_gate.h"
#include "proxy/net/completion.h"
#include "proxy/observe/metrics.h"
#include "proxy/ssh/git_decision.h"
#include "proxy/ssh/ssh_session.h"
#include "proxy/upstream/upstream.h"

namespace sandgate::proxy {

namespace asio = boost::asio;

namespace {

// The broker's host key: the configured file (read again when its path changes), else one
// generated for the life of the process, so that clients see one key across reloads.
Result<std::shared_ptr<const ssh::HostKey>> brokerHostKey(const config::Config& cfg) {
  static std::mutex mu;
  static std::string loadedPath;
  static std::shared_ptr<const ssh::HostKey> loaded;
  static std::shared_ptr<const ssh::HostKey> generated;
  std::lock_guard<std::mutex> lock(mu);
  if (cfg.ssh.hostKey) {
    if (!loaded || loadedPath != *cfg.ssh.hostKey) {
      auto k = ssh::HostKey::fromFile(*cfg.ssh.hostKey);
      if (!k) return k.errors();
      loaded = *k;
      loadedPath = *cfg.ssh.hostKey;
    }
    return loaded;
  }
  if (!generated) {
    auto k = ssh::HostKey::generate();
    if (!k) return k.errors();
    generated = *k;
  }
  return generated;
}

}  // namespace

Result<std::string> sshBrokerPublicLine(const config::Config& cfg) {
  auto key = brokerHostKey(cfg);
  if (!key) return key.errors();
  return (*key)->publicLine();
}

namespace {

// One host a sandbox may reach over SSH, as known_hosts names it.
struct SshHost {
  std::string host;  // an exact name, an address or a "*.suffix" pattern
  uint16_t port = 22;
};

void collect(const config::Config& cfg, const std::string& name, std::set<std::string>* visited,
             std::vector<SshHost>* out) {
  if (!visited->insert(name).second) return;
  auto it = cfg.policies.find(name);
  if (it == cfg.policies.end()) return;
  for (const auto& inc : it->second.include) collect(cfg, inc.value, visited, out);
  for (const auto& rule : it->second.allow) {
    if (!rule.host || rule.host->value.starts_with("re:") || !rule.credential) continue;
    // The SSH broker serves a rule whose credential has `ssh:`, on each port the rule allows.
    auto cred = cfg.credentials.find(rule.credential->value);
    if (cred == cfg.credentials.end() || !cred->second.ssh) continue;
    std::vector<uint16_t> ports;
    for (const auto& p : rule.ports) ports.push_back(p.value);
    if (ports.empty()) ports.push_back(22);
    for (uint16_t port : ports) {
      SshHost h{rule.host->value, port};
      if (std::none_of(out->begin(), out->end(),
                       [&](const SshHost& o) { return o.host == h.host && o.port == h.port; })) {
        out->push_back(h);
      }
    }
  }
}

std::vector<SshHost> sshHosts(const config::Config& cfg, const std::string& policy) {
  std::vector<SshHost> out;
  std::set<std::string> visited;
  collect(cfg, policy, &visited, &out);
  return out;
}

std::string knownHostsText(const std::vector<SshHost>& hosts, const std::string& publicLine) {
  std::string out;
  for (const auto& h : hosts) {
    std::string name = h.port == 22 ? h.host : fmt::format("[{}]:{}", h.host, h.port);
    out += name + " " + publicLine + "\n";
  }
  return out;
}

}  // namespace

std::vector<uint16_t> sshPortsFor(const config::Config& cfg, const std::string& policy) {
  std::vector<uint16_t> ports;
  for (const auto& h : sshHosts(cfg, policy)) {
    if (std::find(ports.begin(), ports.end(), h.port) == ports.end()) ports.push_back(h.port);
  }
  return ports;
}

Result<std::string> sshKnownHostsFor(const config::Config& cfg, const std::string& policy) {
  auto publicLine = sshBrokerPublicLine(cfg);
  if (!publicLine) return publicLine.errors();
  return knownHostsText(sshHosts(cfg, policy), *publicLine);
}

namespace {

// SSH sessions open per task (ssh.max_sessions_per_task): each holds a thread.
class SessionCount {
 public:
  bool take(const std::string& task, uint32_t max) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& n = open_[task];
    if (n >= max) return false;
    ++n;
    return true;
  }
  void give(const std::string& task) {
    std::lock_guard<std::mutex> lock(mu_);
    if (--open_[task] == 0) open_.erase(task);
  }

 private:
  std::mutex mu_;
  std::map<std::string, uint32_t> open_;
};
SessionCount& sessionCount() {
  static SessionCount counts;
  return counts;
}

// Every session thread, so that the server's shutdown can end them and wait for them: a
// thread must not outlive the event loop it posts its end to, nor hold the snapshot and the
// timer it shares with its coroutine past that loop. shutdown(2) on a session's sockets makes
// libssh's poll return, so a thread ends within one poll of stopAll().
class SessionThreads {
 public:
  uint64_t started(std::atomic<bool>* stop, int clientFd, int upstreamFd) {
    std::lock_guard<std::mutex> lock(mu_);
    ++alive_;
    const uint64_t id = ++next_;
    live_[id] = Live{stop, clientFd, upstreamFd};
    if (stopping_) end(live_[id]);
    return id;
  }
  // Before the thread closes its descriptors: stopAll() no longer shuts them down (their
  // numbers may be reused by then).
  void closing(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(id);
  }
  // The thread's last act: it holds nothing of the server any more.
  void exited() {
    std::lock_guard<std::mutex> lock(mu_);
    --alive_;
    cv_.notify_all();
  }
  size_t stopAll(std::chrono::milliseconds bound, size_t* stopped) {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    if (stopped) *stopped = alive_;
    for (auto& [id, live] : live_) end(live);
    cv_.wait_for(lock, bound, [&] { return alive_ == 0; });
    return alive_;
  }

 private:
  struct Live {
    std::atomic<bool>* stop;
    int clientFd, upstreamFd;
  };
  static void end(const Live& l) {
    l.stop->store(true);
    ::shutdown(l.clientFd, SHUT_RDWR);
    ::shutdown(l.upstreamFd, SHUT_RDWR);
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Live> live_;
  uint64_t next_ = 0;
  size_t alive_ = 0;
  bool stopping_ = false;
};
SessionThreads& sessionThreads() {
  static SessionThreads threads;
  return threads;
}

}  // namespace

size_t stopSshSessions(std::chrono::milliseconds bound, size_t* stopped) {
  return sessionThreads().stopAll(bound, stopped);
}

const config::Credential* sshCredential(const ClientConnection& c, const policy::Decision& d) {
  if (d.credential.empty() || !c.snap) return nullptr;
  auto it = c.snap->config.credentials.find(d.credential);
  if (it == c.snap->config.credentials.end() || !it->second.ssh) return nullptr;
  return &it->second;
}

asio::awaitable<void> handleSshBroker(ClientConnection& c, const policy::Target& target,
                                      uint16_t port, const policy::Decision& decision,
                                      RequestLog& log) {
  auto& rec = log.record;
  const TaskEntry& task = *c.task;
  const config::Credential& cred = *sshCredential(c, decision);
  rec.credential = cred.name;
  auto refuseWith = [&](int status, std::string_view reason, std::string detail) {
    return Refusal{.status = status,
                   .reason = reason,
                   .task = task.name,
                   .host = rec.host,
                   .rule = decision.rule,
                   .detail = std::move(detail),
                   .outcome = status == 403 || status == 429 ? Outcome::kDeny : Outcome::kError};
  };
  // The pins and the host key before anything is dialled: without them nothing can be
  // verified, so nothing is tried.
  auto known = ssh::loadKnownHosts(cred.ssh->knownHosts);
  if (!known) {
    Refusal r = refuseWith(
        502, reason::kUpstreamSshFailed,
        fmt::format("the credential's known_hosts cannot be used: {}", known.errorText()));
    co_await refuse(c, log, r);
    co_return;
  }
  auto hostKey = brokerHostKey(c.snap->config);
  if (!hostKey) {
    Refusal r = refuseWith(502, reason::kSshProtocolError, hostKey.errorText());
    co_await refuse(c, log, r);
    co_return;
  }
  BudgetGate budgets(c, log);
  if (auto refusal = budgets.admit(std::nullopt)) {
    co_await refuse(c, log, *refusal);
    co_return;
  }
  TaskSlot tunnelSlot = co_await acquireTunnelSlot(c, log);
  if (!tunnelSlot) co_return;
  if (!sessionCount().take(task.name, c.snap->config.ssh.maxSessionsPerTask)) {
    if (c.metrics) c.metrics->sshRefusal(reason::kSshSessionLimit);
    Refusal r = refuseWith(429, reason::kSshSessionLimit,
                           "the task has ssh.max_sessions_per_task SSH sessions open");
    co_await refuse(c, log, r);
    co_return;
  }
  struct Release {
    std::string task;
    ~Release() { sessionCount().give(task); }
  } release{task.name};

  Refusal dialRefusal;
  auto dialed = co_await dialForClient(c, decision, target, port, log, &dialRefusal);
  if (!dialed) {
    co_await refuse(c, log, dialRefusal);
    co_return;
  }
  asio::ip::tcp::socket upstream = std::move(*dialed);
  if (!co_await sendEstablished(c, log, decision)) co_return;
  // libssh reads the socket itself: bytes the client sent before the 200 (pipelined after
  // the CONNECT head) would be lost to it, so such a client is refused. A ProxyCommand must
  // wait for the 200 (nc -X connect, ssh_connect_proxy.py, `sandgate connect` do).
  if (c.buffer.size() > 0) {
    rec.verdict = Outcome::kDeny;
    rec.reason = std::string(reason::kSshProtocolError);
    rec.error = "the client sent bytes before the CONNECT's 200";
    budgets.settle();
    finishRequest(c, log);
    co_return;
  }
  c.stream.expires_never();

  // The session thread gets its own descriptors (dup): whatever happens to this coroutine,
  // they stay valid until the thread closes them. shutdown(2) on ours (a reload's revocation,
  // the server stopping) ends its reads and so the session.
  struct Shared {
    std::atomic<bool> stop{false};
    std::atomic<bool> finished{false};
    std::mutex mu;
    std::vector<ssh::SshRefusal> refusals;
    ssh::SessionResult result;
  };
  auto shared = std::make_shared<Shared>();
  auto snap = c.snap;  // keeps the engine (decision.git) and the secrets alive
  const policy::GitRules* gitRules = decision.git;
  ssh::SessionParams p;
  p.clientFd = ::dup(c.stream.socket().native_handle());
  p.upstreamFd = ::dup(upstream.native_handle());
  p.hostKey = *hostKey;
  p.upstreamHost = target.name;
  p.user = cred.ssh->user;
  p.pins = known->keysFor(target.name, port);
  const std::string credName = cred.name, taskName = task.name;
  p.privateKey = [snap, credName, taskName](std::string* why) {
    auto fetch = snap->secrets->get(credName, taskName);
    if (!fetch.ok()) {
      *why = fetch.detail;
      return std::string();
    }
    return std::string(fetch.secret->reveal());
  };
  p.decideCommand = [gitRules](const ssh::GitCommand& cmd) {
    return ssh::decideGitCommand(gitRules, cmd);
  };
  p.decidePush = [gitRules](const policy::PushCommands& push) {
    return ssh::decideGitPush(gitRules, push);
  };
  // Counted here, on the session thread (TaskMetrics is thread-safe), all of them; the audit
  // keeps the first 64.
  p.onRefusal = [shared, metrics = c.metrics](const ssh::SshRefusal& r) {
    if (metrics) {
      metrics->sshRefusal(r.reason);
      if (r.reason == reason::kUpstreamHostKeyMismatch) metrics->sshHostKeyMismatch();
    }
    std::lock_guard<std::mutex> lock(shared->mu);
    if (shared->refusals.size() < 64) shared->refusals.push_back(r);
  };
  p.handshakeTimeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      c.limits().connectTimeout + c.limits().headerTimeout);
  p.idleTimeout = std::chrono::duration_cast<std::chrono::milliseconds>(c.limits().idleTimeout);
  p.stop = &shared->stop;

  auto executor = co_await asio::this_coro::executor;
  auto done = std::make_shared<asio::steady_timer>(executor, asio::steady_timer::time_point::max());
  // Started and ended around the thread's life: the gauge says how many threads run now.
  struct ActiveSession {
    std::shared_ptr<TaskMetrics> metrics;
    explicit ActiveSession(std::shared_ptr<TaskMetrics> m) : metrics(std::move(m)) {
      if (metrics) metrics->sshSessionStarted();
    }
    ~ActiveSession() {
      if (metrics) metrics->sshSessionEnded();
    }
  } active(c.metrics);
  // A reload that ended the session says so: the session itself saw only its sockets shut
  // (client_closed), which must not hide why.
  bool revoked = false;
  {
    LiveTunnel live(c, target, port, upstream.native_handle());
    const uint64_t id = sessionThreads().started(&shared->stop, p.clientFd, p.upstreamFd);
    std::thread([id, p = std::move(p), shared, done, executor]() mutable {
      {
        auto result = ssh::runSession(p);
        sessionThreads().closing(id);
        ::close(p.clientFd);
        ::close(p.upstreamFd);
        {
          std::lock_guard<std::mutex> lock(shared->mu);
          shared->result = std::move(result);
        }
        shared->finished = true;
        asio::post(executor, [done] { done->cancel(); });
        // Let go of the snapshot (in the hooks) and the timer before saying we are gone: the
        // server may destroy its event loops as soon as exited() has run.
        p = ssh::SessionParams{};
        done.reset();
        shared.reset();
      }
      sessionThreads().exited();
    }).detach();
    // Cancelled by the thread when it ends, or by the server stopping this coroutine: then
    // the session is told to stop and its sockets shut down, and we wait for it still.
    const int clientFd = c.stream.socket().native_handle();
    const int upstreamFd = upstream.native_handle();
    while (!shared->finished) {
      auto [ec] = co_await done->async_wait(kUse);
      (void)ec;
      if (!shared->finished) {
        shared->stop = true;
        ::shutdown(clientFd, SHUT_RDWR);
        ::shutdown(upstreamFd, SHUT_RDWR);
        done->expires_at(asio::steady_timer::time_point::max());
      }
    }
    // A graceful end: the client may still be sending (window adjusts) while it reads the
    // last of a pack. Closing with those bytes unread would reset the connection, and the
    // client's kernel would drop what it had not read yet (a clone cut short). So: FIN after
    // everything libssh sent, then read and discard until the client closes (bounded).
    boost::system::error_code ec;
    c.stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
    c.stream.expires_after(std::chrono::seconds(5));
    std::array<char, 4096> sink{};
    for (int reads = 0; !ec && reads < 4096; ++reads) {
      auto [rec2, n] = co_await c.stream.async_read_some(asio::buffer(sink), kUse);
      ec = rec2;
      (void)n;
    }
    const std::string prior = rec.reason;
    live.noteEnd(rec);
    revoked = rec.reason != prior;
  }
  std::lock_guard<std::mutex> lock(shared->mu);
  const auto& r = shared->result;
  rec.bytesUp += r.bytesUp;
  rec.bytesDown += r.bytesDown;
  if (c.metrics) c.metrics->sshBytes(r.bytesUp, r.bytesDown);
  if (!r.repository.empty()) {
    GitAudit git;
    git.repository = r.repository;
    git.service = r.service == "git-receive-pack" ? "receive-pack" : "upload-pack";
    for (size_t i = 0; i < r.refs.size(); ++i) {
      git.refs.push_back(
          GitRefAudit{r.refs[i], "", "", i < r.verdicts.size() ? r.verdicts[i] : std::string()});
    }
    rec.git = std::move(git);
  }
  if (!r.reason.empty() && !revoked) {
    rec.reason = std::string(r.reason);
    rec.error = r.detail;
    // What the broker refused is a denial; what the upstream did, an error; an idle or
    // closed client keeps the tunnel's verdict, as a spliced tunnel's does.
    if (r.reason.starts_with("ssh_") || r.reason.starts_with("git_")) {
      rec.verdict = Outcome::kDeny;
    } else if (r.reason.starts_with("upstream_")) {
      rec.verdict = Outcome::kError;
    }
  }
  // One audit line per refusal inside the session (a pty, env, a forwarding), then the
  // session's own line.
  for (const auto& refusal : shared->refusals) {
    if (refusal.reason == r.reason) continue;
    RequestLog extra;
    extra.record = rec;
    extra.record.kind = std::string(audit_kind::kRefusal);
    extra.record.verdict = Outcome::kDeny;
    extra.record.reason = std::string(refusal.reason);
    extra.record.error = refusal.detail;
    extra.record.bytesUp = extra.record.bytesDown = 0;
    extra.record.requestId.clear();
    finishRequest(c, extra);
  }
  budgets.settle();
  finishRequest(c, log);
}

}  // namespace sandgate::proxy
