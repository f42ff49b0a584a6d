// Reloading a server's configuration: SIGHUP, the config file watched once a second, and the
// housekeeping that runs with it (metrics sweep, stale pooled connections).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <csignal>

#include "broker/store.h"
#include "common/logging.h"
#include "common/unix_time.h"
#include "policy/load_problems.h"
#include "proxy/identity/task_token.h"
#include "proxy/observe/audit.h"
#include "proxy/observe/metrics.h"
#include "proxy/server/server_impl.h"
#include "proxy/state/budget_gauges.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// What a review of the open tunnels did; `afterReload`: also those that wait for their grace
// (the housekeeping's reviews would say it every second).
void logReview(const LiveTunnels::Review& r, bool afterReload) {
  if (r.ended > 0) {
    spdlog::info(
        "{} open tunnel(s) the configuration or their task token no longer allows were closed "
        "(revoked_by_reload, or the token's reason)",
        r.ended);
  }
  if (afterReload && r.waiting > 0) {
    spdlog::info(
        "{} open tunnel(s) the configuration no longer allows close when their "
        "revoke_grace is up, unless a reload allows them again",
        r.waiting);
  }
}

}  // namespace

bool Server::Impl::statChanged() {
  struct stat st {};
  if (::stat(options.configPath.c_str(), &st) != 0) return false;
  bool changed = st.st_ino != lastStat.st_ino || st.st_dev != lastStat.st_dev ||
                 st.st_size != lastStat.st_size || st.st_mtim.tv_sec != lastStat.st_mtim.tv_sec ||
                 st.st_mtim.tv_nsec != lastStat.st_mtim.tv_nsec;
  lastStat = st;
  return changed;
}

asio::awaitable<void> Server::Impl::housekeeping() {
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
        w->h2Pool.dropStale();
      });
    }
    // Tunnels whose grace or token is up; and all of them after an admin revocation (POST
    // /v1/revoke makes no new snapshot, and a tunnel sends no token to be refused).
    const auto snap = state.snapshot.load();
    const uint64_t revocations = snap->tokens ? snap->tokens->revocations() : 0;
    // A verifier not seen before (the first tick, a reload) starts from none: a revocation
    // made on it before this tick is caught too.
    const uint64_t seen = snap->tokens.get() == lastVerifier ? lastRevocations : 0;
    const bool revoked = revocations != seen;
    lastVerifier = snap->tokens.get();
    lastRevocations = revocations;
    if (revoked || state.liveTunnels.waiting(unixNow())) {
      logReview(
          state.liveTunnels.review(*snap, std::chrono::steady_clock::now(), !revoked, unixNow()),
          false);
    }
    if (options.watchConfigFile && !options.configPath.empty() && statChanged()) {
      logging::infoWith(fmt::format("config file {} changed; reloading", options.configPath),
                        {{"config", options.configPath}});
      reloadNow();
    }
  }
}

asio::awaitable<void> Server::Impl::signals() {
  while (!stopping) {
    auto [ec, sig] = co_await signalSet->async_wait(kUse);
    if (ec) co_return;
    if (sig == SIGHUP) {
      logging::infoWith(fmt::format("SIGHUP: reloading {}", options.configPath),
                        {{"config", options.configPath}});
      reloadNow();
      if (state.audit) {
        if (auto err = state.audit->reopen()) spdlog::warn("audit log: {}", err->str());
      }
    } else {
      spdlog::info("{}: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
      beginShutdown();
    }
  }
}

bool Server::Impl::reloadNow() {
  std::lock_guard lock(reloadMu);
  auto fail = [&](const Diagnostics& errors) {
    for (const auto& e : errors) spdlog::error("reload: {}", e.str());
    spdlog::error("reload failed; the previous configuration stays in use");
    if (state.metrics) state.metrics->configReload(false);
    return false;
  };
  if (options.configPath.empty()) return false;
  auto report = config::readFile(options.configPath);
  if (!report.errors.empty()) return fail(policy::loadProblems(report));
  auto current = state.snapshot.load();
  auto snap = buildSnapshot(std::move(*report.config), registry, generation.fetch_add(1) + 1);
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
    observeSnapshot(*state.metrics, snap.value());
  }
  logging::infoWith(fmt::format("configuration reloaded (generation {})", snap.value()->generation),
                    {{"generation", std::to_string(snap.value()->generation)}});
  // Keep-alive requests are decided against the new snapshot as they come; open tunnels
  // have no next request, so they are decided again here.
  logReview(
      state.liveTunnels.review(*snap.value(), std::chrono::steady_clock::now(), false, unixNow()),
      true);
  return true;
}

bool Server::reload() { return impl_->reloadNow(); }

}  // namespace sandgate::proxy
