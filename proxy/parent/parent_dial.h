// The upstream leg through a parent proxy (upstream_proxies, issue #44): which parents a
// request goes through, their health, and a tunnel opened through one of them. Policy has
// decided on the client's target before any of this runs, and the addresses asked for were
// vetted by upstream/ (resolve: local); a parent is only a carrier.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "policy/engine.h"
#include "proxy/parent/handshake.h"
#include "proxy/state/snapshot.h"

namespace sandgate::proxy {
class Metrics;
}

namespace sandgate::proxy::parent {

// The parents the upstream leg of a request admitted by `d` to `target` goes through, in the
// order to try them; empty: direct. A rule's `via:` wins over upstream_proxy_direct, which wins
// over upstream_proxy_default.
std::vector<const config::UpstreamProxy*> chainFor(const config::Config& cfg,
                                                   const policy::Decision& d,
                                                   const policy::Target& target);

// Whether `target` matches an upstream_proxy_direct entry: "name" exactly, "*.suffix" any
// subdomain, ".suffix" the name and its subdomains, a CIDR or address the target's literal
// address.
bool isDirect(const std::vector<config::Located<std::string>>& direct,
              const policy::Target& target);

// Health of one parent (shared by every worker; keyed by name and address so that a reload
// that repoints a name starts afresh). A connect failure marks it down for a backoff that
// doubles from 1 s to 60 s; a success resets it.
class Health {
 public:
  static Health& of(const config::UpstreamProxy& p);
  bool up(std::chrono::steady_clock::time_point now) const;
  void failed(std::chrono::steady_clock::time_point now);
  void succeeded();
  int failures() const;

 private:
  mutable std::mutex mu_;
  int failures_ = 0;
  std::chrono::steady_clock::time_point downUntil_{};
};

struct ParentDial {
  std::optional<boost::asio::ip::tcp::socket> socket;  // the tunnel, on success
  std::string_view reason;  // on failure: parent_unreachable, parent_refused, parent_auth_failed
  std::string detail;       // on failure: one sentence naming the parent (never its words)
  bool tryNext = false;     // a connect-level failure: the next parent of the chain may serve
  bool ok() const { return socket.has_value(); }
};

// Connects to `p` (resolve: overrides first; the parent's own address is the operator's
// choice and is not vetted like an upstream's) and asks it for a tunnel to `target`. Without a
// target (an HTTP or HTTPS parent only), the connection is to the parent itself, for plain
// http:// requests sent to it in absolute form (RFC 9112 3.2.2) with proxyAuthorization().
boost::asio::awaitable<ParentDial> dialThrough(const Snapshot& snap, const config::UpstreamProxy& p,
                                               const TunnelTarget* target, config::Seconds timeout,
                                               Metrics* metrics);

// The Proxy-Authorization value for `p` ("Basic ..."; empty when it has no credential), or
// nullopt when its credential is unavailable. Secret: the caller wipes it.
std::optional<std::string> proxyAuthorization(const Snapshot& snap,
                                              const config::UpstreamProxy& p);

}  // namespace sandgate::proxy::parent
