// The proxy server: listeners, workers, snapshots, reload and shutdown (see server.h).
#include "proxy/server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "broker/placeholder.h"
#include "broker/store.h"
#include "common/host_port.h"
#include "common/safe_open.h"
#include "proxy/admin_protocol.h"
#include "proxy/admin_api.h"
#include "proxy/admin_socket.h"
#include "proxy/audit.h"
#include "proxy/cpu_budget.h"
#include "proxy/dns_server.h"
#include "proxy/intercept.h"
#include "proxy/listener_tally.h"
#include "proxy/metrics.h"
#include "proxy/metrics_endpoint.h"
#include "proxy/server_context.h"
#include "proxy/session.h"
#include "proxy/upstream.h"
#include "proxy/worker_loop.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
using asio::ip::tcp;
using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

namespace {

void logException(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    spdlog::error("unexpected exception: {}", ex.what());
  }
}

bool isResourceExhaustion(const boost::system::error_code& ec) {
  return ec == asio::error::no_descriptors || ec.value() == ENFILE || ec.value() == ENOBUFS ||
         ec.value() == ENOMEM;
}

// `owner`, when set, is the acceptor's owner kept alive by this frame: an adopted listener is
// released by closing it on its worker and dropping the registry's reference, which must never
// leave this loop on a freed object.
asio::awaitable<void> acceptLoop(Worker& worker, ServerState& state, tcp::acceptor& acceptor,
                                 std::shared_ptr<const ListenerInfo> listener,
                                 std::shared_ptr<tcp::acceptor> owner = nullptr) {
  static_cast<void>(owner);  // held, not used
  asio::steady_timer backoff(acceptor.get_executor());
  auto lastWarning = std::chrono::steady_clock::time_point{};
  while (acceptor.is_open()) {
    auto [ec, socket] = co_await acceptor.async_accept(kUse);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of descriptors (or memory): the pending connection stays in the backlog, so
      // pause instead of spinning, and keep serving the connections we have.
      auto now = std::chrono::steady_clock::now();
      if (now - lastWarning > std::chrono::seconds(10)) {
        spdlog::warn("accept on {}: {}; backing off", listener->name, ec.message());
        lastWarning = now;
      }
      backoff.expires_after(isResourceExhaustion(ec) ? std::chrono::milliseconds(100)
                                                     : std::chrono::milliseconds(5));
      co_await backoff.async_wait(kUse);
      continue;
    }
    // Responses go out as a header write and then body writes; see upstream.cc on Nagle.
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (listener->tally) {
      // Counted until the session ends, so that a release waits for its last audit record.
      listener->tally->sessionStarted();
      asio::co_spawn(worker.io, runSession(worker, state, std::move(socket), listener),
                     [tally = listener->tally](std::exception_ptr e) {
                       tally->sessionEnded();
                       logException(e);
                     });
    } else {
      asio::co_spawn(worker.io, runSession(worker, state, std::move(socket), listener),
                     logException);
    }
  }
}

OwnEndpoint ownEndpoint(const tcp::endpoint& ep) { return {toIpAddress(ep.address()), ep.port()}; }

Result<tcp::endpoint> listenEndpoint(const config::Config& cfg,
                                     const config::Located<std::string>& value,
                                     std::string_view key) {
  auto hp = parseListenAddress(value.value);  // port 0: any free port (tests)
  if (!hp) {
    return Diagnostic{cfg.file, value.mark.line, value.mark.col, std::string(key),
                      "expected host:port"};
  }
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(hp->host == "localhost" ? "127.0.0.1" : hp->host, ec);
  if (ec) {
    return Diagnostic{cfg.file, value.mark.line, value.mark.col, std::string(key),
                      fmt::format("'{}' is not an IP address", hp->host)};
  }
  return tcp::endpoint(addr, hp->port);
}

// The sockets of one adopted group: listeners (one acceptor per worker and socket; a capture's
// DNS TCP socket on one worker) and a capture's DNS UDP socket.
struct AdoptedGroup {
  std::vector<std::pair<Worker*, std::shared_ptr<tcp::acceptor>>> acceptors;
  std::vector<std::pair<Worker*, std::shared_ptr<asio::ip::udp::socket>>> datagrams;

  // Each is closed on the worker that uses it: its loop ends with operation_aborted and its
  // frame drops the last reference.
  void close() const {
    for (const auto& [w, acc] : acceptors) {
      asio::post(w->io, [acc = acc] {
        boost::system::error_code ec;
        acc->close(ec);
      });
    }
    for (const auto& [w, sock] : datagrams) {
      asio::post(w->io, [sock = sock] {
        boost::system::error_code ec;
        sock->close(ec);
      });
    }
  }
};

int socketFamily(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 ? addr.ss_family
                                                                          : AF_UNSPEC;
}

}  // namespace

struct Server::Impl {
  ServerOptions options;
  ServerState state;
  TaskRegistry registry;
  std::atomic<uint64_t> generation{1};
  std::mutex reloadMu;
  // Destroyed before `state`: pending sessions refer to it.
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  std::vector<std::thread> threads;
  asio::io_context control{1};
  std::optional<asio::signal_set> signalSet;  // on `control`
  std::thread controlThread;
  std::optional<tcp::endpoint> proxyEndpoint, metricsEndpoint;
  std::unique_ptr<tcp::acceptor> metricsAcceptor;
  std::mutex ownMu;
  std::vector<OwnEndpoint> own;
  std::atomic<bool> started{false};
  bool stopping = false;  // control thread only
  struct stat lastStat {};
  // Adopted sockets by group (adoptListeners, adoptCapture). Declared after `workers`:
  // destroyed first, while their io_contexts still exist.
  std::mutex adoptMu;
  uint64_t nextGroup = 1;
  std::map<uint64_t, AdoptedGroup> adopted;
  // Declared last, destroyed first: its thread calls into everything above.
  std::unique_ptr<AdminSocket> admin;

  void addOwn(const tcp::endpoint& ep) {
    std::lock_guard lock(ownMu);
    auto e = ownEndpoint(ep);
    // Every sandbox's listeners are 127.0.0.1:3128 and [::1]:3128: keep each address once.
    for (const auto& o : own) {
      if (o.address == e.address && o.port == e.port) return;
    }
    own.push_back(e);
    state.ownEndpoints.store(std::make_shared<const std::vector<OwnEndpoint>>(own));
  }

  Result<bool> bindProxy(const tcp::endpoint& ep) {
    // One acceptor per worker on the same port (SO_REUSEPORT): the kernel spreads new
    // connections over the workers without a shared accept queue or a lock.
    tcp::endpoint bound = ep;
    for (auto& w : workers) {
      auto acc = std::make_unique<tcp::acceptor>(w->io);
      boost::system::error_code ec;
      acc->open(bound.protocol(), ec);
      if (!ec) acc->set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) acc->set_option(ReusePort(true), ec);
      if (!ec) acc->bind(bound, ec);
      if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
      if (ec) {
        return Diagnostic{
            "", 0, 0, "listen.proxy",
            fmt::format("cannot listen on {}: {}", endpointText(bound), ec.message())};
      }
      bound = acc->local_endpoint();
      w->acceptors.push_back(std::move(acc));
    }
    proxyEndpoint = bound;
    addOwn(bound);
    return true;
  }

  void writeReadyFile() {
    if (!options.readyFile) return;
    boost::json::object o;
    if (proxyEndpoint) o["proxy"] = endpointText(*proxyEndpoint);
    if (metricsEndpoint) o["metrics"] = endpointText(*metricsEndpoint);
    // Temp file + rename, no link followed on the way (a client polls for it to appear whole).
    if (auto err =
            safe_open::replaceFile(*options.readyFile, boost::json::serialize(o) + "\n", 0644)) {
      spdlog::error("cannot write the ready file: {}", *err);
    }
  }

  bool statChanged() {
    struct stat st {};
    if (::stat(options.configPath.c_str(), &st) != 0) return false;
    bool changed = st.st_ino != lastStat.st_ino || st.st_dev != lastStat.st_dev ||
                   st.st_size != lastStat.st_size || st.st_mtim.tv_sec != lastStat.st_mtim.tv_sec ||
                   st.st_mtim.tv_nsec != lastStat.st_mtim.tv_nsec;
    lastStat = st;
    return changed;
  }

  asio::awaitable<void> housekeeping() {
    asio::steady_timer timer(control);
    while (!stopping) {
      timer.expires_after(std::chrono::seconds(1));
      auto [ec] = co_await timer.async_wait(kUse);
      if (ec || stopping) co_return;
      if (state.metrics) {
        state.metrics->sweep(std::chrono::steady_clock::now());
        state.metrics->unwatchedCredentialFiles(broker::unwatchedFileSources());
      }
      for (auto& w : workers) {  // each pool is only touched on its worker's thread
        asio::post(w->io, [w = w.get()] {
          w->pool.dropStale();
          w->tlsPool.dropStale();
        });
      }
      if (options.watchConfigFile && !options.configPath.empty() && statChanged()) {
        spdlog::info("config file {} changed; reloading", options.configPath);
        reloadNow();
      }
    }
  }

  asio::awaitable<void> signals() {
    while (!stopping) {
      auto [ec, sig] = co_await signalSet->async_wait(kUse);
      if (ec) co_return;
      if (sig == SIGHUP) {
        spdlog::info("SIGHUP: reloading {}", options.configPath);
        reloadNow();
        if (state.audit) {
          if (auto err = state.audit->reopen()) spdlog::warn("audit log: {}", err->str());
        }
      } else {
        spdlog::info("signal {}: shutting down", sig);
        beginShutdown();
      }
    }
  }

  bool reloadNow() {
    std::lock_guard lock(reloadMu);
    auto fail = [&](const Diagnostics& errors) {
      for (const auto& e : errors) spdlog::error("reload: {}", e.str());
      spdlog::error("reload failed; the previous configuration stays in use");
      if (state.metrics) state.metrics->configReload(false);
      return false;
    };
    if (options.configPath.empty()) return false;
    auto cfg = config::loadFile(options.configPath);
    if (!cfg) return fail(cfg.errors());
    auto current = state.snapshot.load();
    auto snap = buildSnapshot(std::move(cfg.value()), registry, generation.fetch_add(1) + 1);
    if (!snap) return fail(snap.errors());
    const auto& next = snap.value()->config;
    auto text = [](const auto& v) { return v ? v->value : std::string(); };
    if (text(next.listen.proxy) != text(current->config.listen.proxy) ||
        text(next.listen.metrics) != text(current->config.listen.metrics) ||
        text(next.listen.admin) != text(current->config.listen.admin) ||
        text(next.listen.adminGroup) != text(current->config.listen.adminGroup) ||
        next.audit.path != current->config.audit.path) {
      spdlog::warn("reload: changes to listen and audit take effect after a restart");
    }
    if (started) snap.value()->secrets->startRefresh();
    state.snapshot.store(snap.value());
    if (state.metrics) {
      state.metrics->configReload(true);
      state.metrics->configInfo(snap.value()->config.sha256);
    }
    spdlog::info("configuration reloaded (generation {})", snap.value()->generation);
    return true;
  }

  void beginShutdown() {
    if (stopping) return;
    stopping = true;
    // Not ready at once, so that the load balancer stops sending clients here; `draining`
    // (no more keep-alive, no adoptions) waits for the drain delay in drainAndStop.
    if (state.metrics) state.metrics->setReady(false);
    control.stop();  // ends signals/housekeeping; the drain runs below on this thread
  }

  void drainAndStop() {
    if (options.drainDelay.count() > 0) {
      // Clients routed here before the endpoint removal reached every node still arrive for a
      // while: keep accepting and serving them as usual until the delay is over.
      spdlog::info("shutdown: not ready; still accepting for {} ms (drain delay)",
                   options.drainDelay.count());
      std::this_thread::sleep_for(options.drainDelay);
    }
    state.draining.store(true);
    // First: no new adoptions, and every run's listeners closed with the others below.
    if (admin) admin->stop();
    auto snap = state.snapshot.load();
    auto grace = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        snap->defaults.shutdownGrace);
    for (auto& w : workers) {
      asio::post(w->io, [w = w.get()] {
        boost::system::error_code ec;
        for (auto& a : w->acceptors) a->close(ec);
        for (auto* s : w->idle) s->cancel(ec);
        w->pool.clear();
        w->tlsPool.clear();
      });
    }
    {
      std::lock_guard lock(adoptMu);
      for (auto& [id, group] : adopted) group.close();
    }
    auto deadline = std::chrono::steady_clock::now() + grace;
    while (state.activeSessions.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a bounded drain poll
    }
    if (state.activeSessions.load() > 0) {
      spdlog::warn("shutdown: closing {} connections still open after the grace period",
                   state.activeSessions.load());
    }
    for (auto& g : guards) g.reset();
    for (auto& w : workers) w->io.stop();
    for (auto& t : threads) t.join();
    threads.clear();
  }
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  if (impl_->started) {
    shutdown();
    wait();
  }
  // Destroying the signal_set restores the default actions, so a repeated SIGTERM (a
  // supervisor repeating itself) arriving while the process exits would kill it and turn a
  // clean exit into death by signal. The shutdown is done: ignore them from here on.
  if (impl_->signalSet) {
    impl_->signalSet.reset();
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, SIG_IGN);
  }
}

Result<std::unique_ptr<Server>> Server::create(ServerOptions options) {
  auto cfg = config::loadFile(options.configPath);
  if (!cfg) return cfg.errors();
  return create(std::move(cfg.value()), std::move(options));
}

Result<std::unique_ptr<Server>> Server::create(config::Config config, ServerOptions options) {
  // A peer that closes while we write (or splice) must be an error code, not a signal.
  std::signal(SIGPIPE, SIG_IGN);
  // Owned from here, so that every error below closes it.
  std::shared_ptr<AuditLog> adoptedAudit;
  if (options.auditFd >= 0) adoptedAudit = AuditLog::adopt(std::exchange(options.auditFd, -1));
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  unsigned n = impl->options.threads;
  if (n == 0) {
    // More workers than the CPUs we may run on only time-share them: each worker's loop then
    // waits for the others' slices, which shows as tail latency.
    auto budget = currentCpuBudget();
    n = budget.cpus;
    spdlog::info("{} worker threads: {}", n, budget.why);
  }
  for (unsigned i = 0; i < n; ++i) impl->workers.push_back(std::make_unique<Worker>());
  if (!impl->options.configPath.empty()) impl->statChanged();

  auto listenProxy = config.listen.proxy;
  auto listenMetrics = config.listen.metrics;
  auto listenAdmin = config.listen.admin;
  auto listenAdminGroup = config.listen.adminGroup;
  auto configFile = config.file;
  auto auditPath = config.audit.path;
  auto ttl = std::chrono::duration_cast<std::chrono::seconds>(config.metrics.taskSeriesTtl);
  Diagnostics errors;
  std::optional<tcp::endpoint> proxyEp, metricsEp;
  if (listenProxy) {
    auto ep = listenEndpoint(config, *listenProxy, "listen.proxy");
    if (ep)
      proxyEp = *ep;
    else
      errors.insert(errors.end(), ep.errors().begin(), ep.errors().end());
  }
  if (listenMetrics) {
    auto ep = listenEndpoint(config, *listenMetrics, "listen.metrics");
    if (ep)
      metricsEp = *ep;
    else
      errors.insert(errors.end(), ep.errors().begin(), ep.errors().end());
  }
  // Interception fails closed: a CA that cannot be loaded stops start-up.
  auto interception = Interception::create(config);
  if (!interception) {
    errors.insert(errors.end(), interception.errors().begin(), interception.errors().end());
  } else {
    impl->state.interception = interception.value();
  }
  auto snap = buildSnapshot(std::move(config), impl->registry, 1);
  if (!snap) errors.insert(errors.end(), snap.errors().begin(), snap.errors().end());
  if (!errors.empty()) return errors;
  impl->state.snapshot.store(snap.value());

  if (adoptedAudit) {
    impl->state.audit = std::move(adoptedAudit);
  } else {
    auto audit = AuditLog::open(auditPath);
    if (!audit) return audit.errors();
    impl->state.audit = audit.value();
  }
  impl->state.metrics = std::make_shared<Metrics>(ttl);
  impl->state.metrics->configInfo(impl->state.snapshot.load()->config.sha256);

  if (proxyEp) {
    if (auto r = impl->bindProxy(*proxyEp); !r) return r.errors();
  }
  if (metricsEp) {
    auto acc = std::make_unique<tcp::acceptor>(impl->workers[0]->io);
    boost::system::error_code ec;
    acc->open(metricsEp->protocol(), ec);
    if (!ec) acc->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acc->bind(*metricsEp, ec);
    if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Diagnostic{
          "", 0, 0, "listen.metrics",
          fmt::format("cannot listen on {}: {}", endpointText(*metricsEp), ec.message())};
    }
    impl->metricsEndpoint = acc->local_endpoint();
    impl->addOwn(*impl->metricsEndpoint);
    impl->metricsAcceptor = std::move(acc);
  }
  auto server = std::unique_ptr<Server>(new Server(std::move(impl)));
  if (listenAdmin) {
    AdminSocketOptions adminOptions;
    adminOptions.path = listenAdmin->value;
    if (listenAdminGroup) {
      auto gid = resolveAdminGroup(configFile, *listenAdminGroup);
      if (!gid) return gid.errors();
      adminOptions.group = gid.value();
    }
    auto admin = AdminSocket::open(std::move(adminOptions), server->adminBackend());
    if (!admin) {
      Diagnostics errors = admin.errors();
      for (auto& e : errors) {
        e.file = configFile;
        e.line = listenAdmin->mark.line;
        e.col = listenAdmin->mark.col;
      }
      return errors;
    }
    server->impl_->admin = std::move(admin.value());
  }
  return server;
}

AdminBackend Server::adminBackend() {
  AdminBackend b;
  auto unknownTask = [](const config::Config& cfg, const std::string& task) {
    std::string names;
    for (const auto& t : cfg.tasks) names += (names.empty() ? "" : ", ") + t.name;
    return Diagnostic{"", 0, 0, std::string(admin_reason::kUnknownTask),
                      fmt::format("no task '{}' in {} (tasks: {})", task, cfg.file,
                                  names.empty() ? "none" : names)};
  };
  // The reply of task_env or token_env: the policy, the CA and the placeholders of `env`.
  auto reply = [this, unknownTask](const std::string& task, bool run,
                                   std::shared_ptr<const broker::PlaceholderSet>* placeholders)
      -> Result<TaskEnvironment> {
    auto snap = impl_->state.snapshot.load();
    const config::Task* t = snap->config.findTask(task);
    if (!t) return unknownTask(snap->config, task);
    auto env = run ? sandboxEnvironment(task) : tokenClientEnvironment(task);
    if (!env) {
      return Diagnostic{"", 0, 0, std::string(admin_reason::kUnavailable),
                        env.errors().front().message};
    }
    if (placeholders) *placeholders = env->placeholders;
    TaskEnvironment out;
    out.policy = t->policy.value;
    out.caPem = env->caPem;
    for (const auto& [name, value] : env->variables) out.env[name] = value;
    if (!run) return out;
    // Absolute: the launcher resolves them from its own working directory, not serve's.
    for (auto p : snap->config.secretPaths()) {
      if (!p.empty() && p.front() != '/') {
        std::error_code ec;
        auto abs = std::filesystem::absolute(p, ec);
        if (!ec) p = abs.lexically_normal().string();
      }
      out.hiddenPaths.push_back(std::move(p));
    }
    // Serve's config decides the pools: the launcher routes them before the sandbox exists.
    out.capture = CaptureOffer{snap->capture.ports, snap->capture.v4Text, snap->capture.v6Text};
    return out;
  };
  b.environment = [reply](const std::string& task) -> Result<RunEnvironment> {
    RunEnvironment run;
    auto out = reply(task, true, &run.placeholders);
    if (!out) return out.errors();
    run.reply = std::move(out.value());
    return run;
  };
  b.tokenEnvironment = [reply](const std::string& task) { return reply(task, false, nullptr); };
  b.adopt = [this, unknownTask](std::vector<int> fds, const std::string& task,
                                std::shared_ptr<ListenerTally> tally,
                                std::shared_ptr<const broker::PlaceholderSet> placeholders)
      -> Result<uint64_t> {
    auto snap = impl_->state.snapshot.load();
    if (!snap->config.findTask(task)) {
      for (int fd : fds) ::close(fd);
      return unknownTask(snap->config, task);
    }
    auto group =
        adoptListeners(std::move(fds), task, std::move(tally), nullptr, std::move(placeholders));
    if (!group) {
      return Diagnostic{"", 0, 0, std::string(admin_reason::kUnavailable),
                        group.errors().front().message};
    }
    return group.value();
  };
  b.adoptCapture = [this, unknownTask](
                       CaptureSockets sockets, CaptureOptions options,
                       std::shared_ptr<ListenerTally> tally,
                       std::shared_ptr<const broker::PlaceholderSet> placeholders)
      -> Result<AdoptedCapture> {
    auto snap = impl_->state.snapshot.load();
    if (!snap->config.findTask(options.task)) {
      sockets.close();
      return unknownTask(snap->config, options.task);
    }
    auto adopted = adoptCapture(std::move(sockets), std::move(options), std::move(tally),
                                std::move(placeholders));
    if (!adopted) {
      return Diagnostic{"", 0, 0, std::string(admin_reason::kUnavailable),
                        adopted.errors().front().message};
    }
    return adopted.value();
  };
  b.release = [this](uint64_t group) { releaseListeners(group); };
  // The current snapshot's: a reload that changes a task's admin_groups applies to the next
  // request.
  b.taskGroups = [this](const std::string& task) -> std::optional<std::vector<gid_t>> {
    auto snap = impl_->state.snapshot.load();
    const TaskEntry* t = snap->findTask(task);
    if (!t) return std::nullopt;
    return t->adminGids;
  };
  return b;
}

Result<bool> Server::adoptListener(int fd, std::string task,
                                   std::shared_ptr<const broker::PlaceholderSet> placeholders) {
  auto group = adoptListeners({fd}, std::move(task), nullptr, nullptr, std::move(placeholders));
  if (!group) return group.errors();
  return true;
}

Result<uint64_t> Server::adoptListeners(
    std::vector<int> fds, std::string task, std::shared_ptr<ListenerTally> tally,
    std::shared_ptr<CaptureContext> capture,
    std::shared_ptr<const broker::PlaceholderSet> placeholders) {
  auto& im = *impl_;
  // A run without placeholders of its own honours none: never another run's, never the token
  // clients' of its task.
  if (!placeholders) {
    placeholders = std::make_shared<const broker::PlaceholderSet>(std::vector<broker::Placeholder>{});
  }
  auto closeAll = [&] {
    for (int fd : fds) ::close(fd);
  };
  if (im.state.draining.load()) {
    closeAll();
    return Diagnostic{"", 0, 0, "", "the server is shutting down"};
  }
  struct Pending {
    Worker* worker;
    std::shared_ptr<tcp::acceptor> acceptor;
    std::shared_ptr<const ListenerInfo> info;
  };
  std::vector<Pending> pending;
  std::vector<tcp::endpoint> locals;
  for (int fd : fds) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    sockaddr_storage addr{};
    socklen_t addrLen = sizeof(addr);
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addrLen) != 0 ||
        (addr.ss_family != AF_INET && addr.ss_family != AF_INET6)) {
      closeAll();
      return Diagnostic{"", 0, 0, "", fmt::format("fd {} is not a listening TCP socket", fd)};
    }
    tcp::endpoint local;
    std::memcpy(local.data(), &addr, std::min<size_t>(addrLen, sizeof(addr)));
    local.resize(addrLen);
    auto info = std::make_shared<const ListenerInfo>(
        ListenerInfo{endpointText(local), task, tally, capture, placeholders});
    // Every worker accepts on its own duplicate of the descriptor (one shared queue). The
    // acceptors are registered here (the reactor is thread-safe) and used only on their worker.
    for (auto& w : im.workers) {
      int dupFd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
      if (dupFd < 0) {
        auto err = fmt::format("dup of fd {}: {}", fd, std::strerror(errno));
        closeAll();
        return Diagnostic{"", 0, 0, "", err};
      }
      auto acc = std::make_shared<tcp::acceptor>(w->io);
      boost::system::error_code ec;
      acc->assign(local.protocol(), dupFd, ec);
      if (ec) {
        ::close(dupFd);
        closeAll();
        return Diagnostic{"", 0, 0, "",
                          fmt::format("adopting listener {}: {}", info->name, ec.message())};
      }
      pending.push_back(Pending{w.get(), std::move(acc), info});
    }
    locals.push_back(local);
  }
  closeAll();  // the workers hold duplicates
  // A capture listener is bound to a wildcard inside the sandbox's network namespace: as an
  // "own endpoint" it would make every loopback upstream on port 80/443 look like a loop, and
  // nothing on the host can reach it anyway.
  if (!capture) {
    for (const auto& local : locals) im.addOwn(local);
  }
  uint64_t group;
  {
    std::lock_guard lock(im.adoptMu);
    group = im.nextGroup++;
    auto& entry = im.adopted[group];
    for (const auto& p : pending) entry.acceptors.emplace_back(p.worker, p.acceptor);
  }
  for (auto& p : pending) {
    asio::post(p.worker->io, [w = p.worker, state = &im.state, acc = p.acceptor, info = p.info] {
      if (state->draining.load()) {
        boost::system::error_code ec;
        acc->close(ec);
        return;
      }
      asio::co_spawn(w->io, acceptLoop(*w, *state, *acc, info, acc), logException);
    });
  }
  return group;
}

void Server::releaseListeners(uint64_t group) {
  AdoptedGroup sockets;
  {
    std::lock_guard lock(impl_->adoptMu);
    auto it = impl_->adopted.find(group);
    if (it == impl_->adopted.end()) return;
    sockets = std::move(it->second);
    impl_->adopted.erase(it);
  }
  sockets.close();
}

namespace {

// The environment of `task` with the placeholders `set` (those of the credentials its policy
// names); made by `make` when interception is available.
template <typename MakeSet>
Result<SandboxEnvironment> environmentOf(const ServerState& state, const std::string& task,
                                         MakeSet make) {
  auto snap = state.snapshot.load();
  const TaskEntry* t = snap->findTask(task);
  if (!t) {
    return Diagnostic{"", 0, 0, "", fmt::format("no task '{}' in {}", task, snap->config.file)};
  }
  SandboxEnvironment env;
  const auto& icpt = state.interception;
  if (!icpt) return env;
  env.caPem = icpt->caCertificatePem();
  env.placeholders = make(*icpt, *snap);
  for (const auto& p : env.placeholders->all()) {
    if (std::binary_search(t->credentials.begin(), t->credentials.end(), p.credential)) {
      env.variables.emplace_back(p.variable, p.value);
    }
  }
  return env;
}

}  // namespace

Result<SandboxEnvironment> Server::sandboxEnvironment(const std::string& task) {
  return environmentOf(impl_->state, task, [](Interception&, const Snapshot& snap) {
    return broker::PlaceholderSet::generate(snap.config.credentials, *snap.secrets);
  });
}

Result<SandboxEnvironment> Server::tokenClientEnvironment(const std::string& task) {
  return environmentOf(impl_->state, task, [&](Interception& icpt, const Snapshot& snap) {
    return icpt.placeholdersFor(task, snap.config.credentials, *snap.secrets);
  });
}

Result<AdoptedCapture> Server::adoptCapture(
    CaptureSockets sockets, CaptureOptions options, std::shared_ptr<ListenerTally> tally,
    std::shared_ptr<const broker::PlaceholderSet> placeholders) {
  auto& im = *impl_;
  auto fail = [&](std::string message) {
    sockets.close();
    return Diagnostic{"", 0, 0, "", std::move(message)};
  };
  if (auto e = capture::checkPoolRanges(options.v4, options.v6)) return fail(*e);
  if (sockets.dnsUdp >= 0) {
    if (auto bad = checkDatagramFd(sockets.dnsUdp)) return fail("the DNS UDP socket: " + *bad);
  }
  if (sockets.dnsTcp >= 0) {
    if (auto bad = checkListenerFd(sockets.dnsTcp)) return fail("the DNS TCP socket: " + *bad);
  }
  const std::string task = options.task;
  auto ctx = std::make_shared<CaptureContext>(std::move(options), im.state, tally);
  // The capture listeners make the group (and are checked there); the DNS sockets join it.
  auto group =
      adoptListeners(std::move(sockets.listeners), task, tally, ctx, std::move(placeholders));
  sockets.listeners.clear();  // adoptListeners owns them, on error too
  if (!group) {
    sockets.close();
    return group.errors();
  }
  // The DNS stub is light (one datagram, one answer): both sockets live on the first worker.
  // Assigned here (the reactor is thread-safe), served from its thread.
  Worker* w = im.workers.front().get();
  std::shared_ptr<asio::ip::udp::socket> udp;
  std::shared_ptr<tcp::acceptor> acc;
  boost::system::error_code ec;
  if (sockets.dnsUdp >= 0) {
    udp = std::make_shared<asio::ip::udp::socket>(w->io);
    bool v6 = socketFamily(sockets.dnsUdp) == AF_INET6;
    udp->assign(v6 ? asio::ip::udp::v6() : asio::ip::udp::v4(), sockets.dnsUdp, ec);
    if (!ec) sockets.dnsUdp = -1;  // the socket object owns it
  }
  if (!ec && sockets.dnsTcp >= 0) {
    acc = std::make_shared<tcp::acceptor>(w->io);
    bool v6 = socketFamily(sockets.dnsTcp) == AF_INET6;
    acc->assign(v6 ? tcp::v6() : tcp::v4(), sockets.dnsTcp, ec);
    if (!ec) sockets.dnsTcp = -1;
  }
  if (ec) {
    releaseListeners(group.value());
    sockets.close();
    return Diagnostic{"", 0, 0, "", fmt::format("adopting the DNS stub: {}", ec.message())};
  }
  {
    std::lock_guard lock(im.adoptMu);
    auto& entry = im.adopted[group.value()];
    if (udp) entry.datagrams.emplace_back(w, udp);
    if (acc) entry.acceptors.emplace_back(w, acc);
  }
  // Posted after the group's listeners: a release posts its closes after this, so the loops
  // always start on an open socket and see it closed.
  asio::post(w->io, [w, state = &im.state, udp, acc, ctx] {
    boost::system::error_code ignored;
    if (state->draining.load()) {
      if (udp) udp->close(ignored);
      if (acc) acc->close(ignored);
      return;
    }
    if (udp) asio::co_spawn(w->io, serveDnsUdp(udp, ctx), logException);
    if (acc) asio::co_spawn(w->io, serveDnsTcp(acc, ctx), logException);
  });
  return AdoptedCapture{ctx, group.value()};
}

void Server::start() {
  auto& im = *impl_;
  if (im.started) return;
  {
    // Threads start here, never in create(): `sandgate run` forks its sandbox in between.
    // Under reloadMu: a reload from now on starts its own store's refresh.
    std::lock_guard lock(im.reloadMu);
    im.started = true;
    im.state.snapshot.load()->secrets->startRefresh();
  }
  for (auto& w : im.workers) {
    im.guards.push_back(asio::make_work_guard(w->io));
    for (auto& acc : w->acceptors) {
      auto info = std::make_shared<const ListenerInfo>(
          ListenerInfo{endpointText(*im.proxyEndpoint), std::nullopt, nullptr, nullptr, nullptr});
      asio::co_spawn(w->io, acceptLoop(*w, im.state, *acc, info), logException);
    }
  }
  if (im.metricsAcceptor) {
    asio::co_spawn(im.workers[0]->io,
                   serveMetrics(std::move(*im.metricsAcceptor), im.state.metrics,
                                [&state = im.state](const ApiRequest& req) {
                                  const int64_t now =
                                      std::chrono::duration_cast<std::chrono::seconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count();
                                  return handleAdminApi(req, *state.snapshot.load(), now);
                                }),
                   logException);
  }
  for (auto& w : im.workers) {
    im.threads.emplace_back([w = w.get(), spin = im.options.idleSpin] {
      while (true) {
        try {
          runWorker(w->io, spin);
          return;
        } catch (const std::exception& e) {
          spdlog::error("worker: {}", e.what());
        }
      }
    });
  }
  if (im.options.handleSignals) {
    // Installed before the ready file exists: a SIGHUP or SIGTERM sent as soon as a client
    // sees us ready must not hit the default action (terminate).
    im.signalSet.emplace(im.control, SIGINT, SIGTERM, SIGHUP);
    asio::co_spawn(im.control, im.signals(), logException);
  }
  asio::co_spawn(im.control, im.housekeeping(), logException);
  if (im.admin) im.admin->start();
  im.state.metrics->setReady(true);
  im.writeReadyFile();
  spdlog::info("sandgate serving: proxy {} metrics {} admin {} ({} worker threads)",
               im.proxyEndpoint ? endpointText(*im.proxyEndpoint) : "-",
               im.metricsEndpoint ? endpointText(*im.metricsEndpoint) : "-",
               im.admin ? im.admin->path() : "-", im.workers.size());
  im.controlThread = std::thread([&im] {
    auto guard = asio::make_work_guard(im.control);
    im.control.run();
    im.drainAndStop();
  });
}

void Server::wait() {
  if (impl_->controlThread.joinable()) impl_->controlThread.join();
}

int Server::run() {
  start();
  wait();
  return 0;
}

void Server::shutdown() {
  asio::post(impl_->control, [im = impl_.get()] { im->beginShutdown(); });
}

bool Server::reload() { return impl_->reloadNow(); }

std::optional<std::string> Server::proxyAddress() const {
  if (!impl_->proxyEndpoint) return std::nullopt;
  return endpointText(*impl_->proxyEndpoint);
}

std::optional<std::string> Server::metricsAddress() const {
  if (!impl_->metricsEndpoint) return std::nullopt;
  return endpointText(*impl_->metricsEndpoint);
}

}  // namespace sandgate::proxy
