// The proxy server's life: create (config, workers, listeners, interception, the admin
// socket), start, drain and shutdown (see server.h; the rest of Server is in listeners.cc,
// reload.cc and admin_backend.cc).
#include "proxy/server/server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/json.hpp>
#include <csignal>

#include "common/logging.h"
#include "common/safe_open.h"
#include "policy/load_problems.h"
#include "proxy/admin/admin_api.h"
#include "proxy/intercept/intercept.h"
#include "proxy/net/endpoint.h"
#include "proxy/observe/audit.h"
#include "proxy/observe/metrics.h"
#include "proxy/observe/metrics_endpoint.h"
#include "proxy/server/cpu_budget.h"
#include "proxy/server/server_impl.h"
#include "proxy/server/worker_loop.h"
#include "proxy/state/budget_gauges.h"
#include "proxy/ssh/ssh_broker.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
using asio::ip::tcp;

void logException(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    spdlog::error("unexpected exception: {}", ex.what());
  }
}

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
  // Every problem at once (the rule compiler's too), as `sandgate policy lint` shows them.
  auto report = config::readFile(options.configPath);
  if (!report.errors.empty()) return policy::loadProblems(report);
  return create(std::move(*report.config), std::move(options));
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
    impl->workersWhy = budget.why;
  } else {
    impl->workersWhy = "set by --threads";
  }
  for (unsigned i = 0; i < n; ++i) impl->workers.push_back(std::make_unique<Worker>());
  if (!impl->options.configPath.empty()) impl->statChanged();

  auto listenProxy = config.listen.proxy;
  auto listenMetrics = config.listen.metrics;
  auto listenAdmin = config.listen.admin;
  if (impl->options.requireClientListener && !listenProxy && !listenAdmin) {
    return Diagnostic{config.file, 0, 0, "listen",
                      "nothing to serve: set listen.proxy (token clients) or listen.admin "
                      "(sandgate run --proxy); listen.metrics alone takes no client"};
  }
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
  observeSnapshot(*impl->state.metrics, impl->state.snapshot.load());
  impl->state.metrics->configLoaded();

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

void Server::Impl::writeReadyFile() {
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

void Server::Impl::beginShutdown() {
  if (stopping) return;
  stopping = true;
  // Not ready at once, so that the load balancer stops sending clients here; `draining`
  // (no more keep-alive, no adoptions) waits for the drain delay in drainAndStop.
  if (state.metrics) state.metrics->setReady(false);
  control.stop();  // ends signals/housekeeping; the drain runs below on this thread
}

void Server::Impl::drainAndStop() {
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
  auto grace =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(snap->defaults.shutdownGrace);
  for (auto& w : workers) {
    asio::post(w->io, [w = w.get()] {
      boost::system::error_code ec;
      for (auto& a : w->acceptors) a->close(ec);
      for (auto* s : w->idle) s->cancel(ec);
      w->pool.clear();
      w->tlsPool.clear();
      w->h2Pool.clear();
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
  // SSH sessions run on threads of their own (libssh blocks): end them and wait for them
  // (bounded) while the event loops still run, so that no thread outlives the loop it reports
  // to; then let their connections write their audit lines.
  size_t sshStopped = 0;
  if (const size_t left = stopSshSessions(std::chrono::seconds(5), &sshStopped); left > 0) {
    spdlog::warn("shutdown: {} SSH session threads did not end within 5 s", left);
  }
  const auto audited = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (sshStopped > 0 && state.activeSessions.load() > 0 &&
         std::chrono::steady_clock::now() < audited) {
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
      auto info = std::make_shared<const ListenerInfo>(ListenerInfo{
          endpointText(*im.proxyEndpoint), std::nullopt, nullptr, nullptr, nullptr, {}});
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
  // One line says what serves where and why so many workers (said once: the count and its
  // reason were two lines before); in JSON each is a field an operator can filter on.
  const std::string proxyText = im.proxyEndpoint ? endpointText(*im.proxyEndpoint) : "off";
  const std::string metricsText = im.metricsEndpoint ? endpointText(*im.metricsEndpoint) : "off";
  const std::string adminText = im.admin ? im.admin->path() : "off";
  if (!im.proxyEndpoint && !im.metricsEndpoint && !im.admin) {
    // Embedded in sandgate run: it serves only the listeners the launcher hands over.
    spdlog::info("proxy serving the sandbox's listeners; {} worker threads", im.workers.size());
  } else {
    logging::infoWith(
        fmt::format("sandgate serving: proxy {}, metrics {}, admin {}; {} worker threads: {}",
                    proxyText, metricsText, adminText, im.workers.size(), im.workersWhy),
        {{"proxy", proxyText},
         {"metrics", metricsText},
         {"admin", adminText},
         {"workers", std::to_string(im.workers.size())}});
  }
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

std::optional<std::string> Server::proxyAddress() const {
  if (!impl_->proxyEndpoint) return std::nullopt;
  return endpointText(*impl_->proxyEndpoint);
}

std::optional<std::string> Server::metricsAddress() const {
  if (!impl_->metricsEndpoint) return std::nullopt;
  return endpointText(*impl_->metricsEndpoint);
}

}  // namespace sandgate::proxy
