// What every connection of a running Server shares (ServerState) and what one worker thread
// owns (Worker). Internal to proxy/.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "policy/engine.h"
#include "policy/ip.h"
#include "proxy/net/completion.h"
#include "proxy/net/connection_pool.h"
#include "proxy/state/live_tunnels.h"
#include "proxy/state/questions.h"
#include "proxy/state/snapshot.h"
#include "proxy/state/token_placeholders.h"

namespace sandgate::proxy {

class AuditLog;
class Metrics;

// Config durations (double seconds) as the clock's duration, for deadlines.
inline std::chrono::steady_clock::duration toDuration(config::Seconds s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(s);
}

class ListenerTally;
class CaptureContext;

// A listening socket and who its clients are.
struct ListenerInfo {
  std::string name;                 // local "ip:port" for the audit log
  std::optional<std::string> task;  // set: every connection belongs to this task
  // Set for listeners adopted through the admin socket: their connections and audit records
  // are counted for the launcher's report.
  std::shared_ptr<ListenerTally> tally;
  // Set: a capture listener (transparent mode). Its connections were made to a synthetic
  // address and are treated as CONNECT (or, on port 80, forward requests) to that name.
  std::shared_ptr<CaptureContext> capture;
  // The placeholders its connections honour: a run's own for an adopted listener (empty when
  // the run asked for none); null on serve's own listeners, whose token clients use their
  // task's (ServerState::tokenPlaceholders).
  std::shared_ptr<const broker::PlaceholderSet> placeholders;
  // The run that handed this listener over (`run --proxy`): every audit line of its
  // connections names it. Empty for serve's own listeners.
  std::string run;
};

// An address sandgate itself listens on: dialling it would loop through the proxy.
struct OwnEndpoint {
  policy::IpAddress address;
  uint16_t port = 0;
};

class Interception;

// Plain TCP upstream connections of forwarded requests.
template <>
struct PooledConnection<boost::asio::ip::tcp::socket> {
  static bool quiet(boost::asio::ip::tcp::socket& s) {
    return s.is_open() && socketIsQuiet(s.native_handle());
  }
};
using TcpPool = IdlePool<boost::asio::ip::tcp::socket>;

// A verified TLS connection to an upstream with its read buffer (intercept_session.cc).
struct UpstreamTlsConnection;
template <>
struct PooledConnection<std::shared_ptr<UpstreamTlsConnection>> {
  static bool quiet(std::shared_ptr<UpstreamTlsConnection>& c);
};
using TlsPool = IdlePool<std::shared_ptr<UpstreamTlsConnection>>;

// A verified HTTP/2 connection to an upstream with its nghttp2 session (h2/h2_upstream.cc).
struct H2Upstream;
template <>
struct PooledConnection<std::shared_ptr<H2Upstream>> {
  static bool quiet(std::shared_ptr<H2Upstream>& up);
};
using H2Pool = IdlePool<std::shared_ptr<H2Upstream>>;

struct ServerState {
  std::atomic<std::shared_ptr<const Snapshot>> snapshot;
  std::atomic<std::shared_ptr<const std::vector<OwnEndpoint>>> ownEndpoints{
      std::make_shared<const std::vector<OwnEndpoint>>()};
  std::shared_ptr<Metrics> metrics;
  std::shared_ptr<AuditLog> audit;
  std::atomic<bool> draining{false};
  std::atomic<int64_t> activeSessions{0};
  std::shared_ptr<Interception> interception;  // null: intercepting CONNECTs are refused
  TokenPlaceholders tokenPlaceholders;         // used only where interception is available
  LiveTunnels liveTunnels;                     // what a reload may revoke
  Questions questions;                         // on_unknown: ask: held requests
};

// One thread's io_context and what lives on it. Only touched from that thread.
// Member order matters: `io` is destroyed after the sockets below (they belong to it) and
// before `idle` (sessions still suspended on it erase themselves from `idle`).
struct Worker {
  // Sockets of sessions waiting for a request head: cancelled when shutdown starts, so idle
  // keep-alive connections do not hold the shutdown grace period open.
  std::unordered_set<boost::asio::ip::tcp::socket*> idle;
  boost::asio::io_context io{1};
  TcpPool pool;     // forwarded requests' upstream connections
  TlsPool tlsPool;  // intercepted requests' upstream connections
  H2Pool h2Pool;    // intercepted HTTP/2 connections' upstream connections
  std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>> acceptors;
};

// Serves one accepted client connection until it closes.
boost::asio::awaitable<void> runSession(Worker& worker, ServerState& state,
                                        boost::asio::ip::tcp::socket socket,
                                        std::shared_ptr<const ListenerInfo> listener);

}  // namespace sandgate::proxy
