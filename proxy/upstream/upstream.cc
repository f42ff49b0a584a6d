// Resolve, vet and dial (see upstream.h).
#include "proxy/upstream/upstream.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "policy/address_class.h"
#include "proxy/client/refusal.h"
#include "proxy/net/endpoint.h"
#include "proxy/observe/metrics.h"
#include "proxy/parent/parent_dial.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

policy::IpAddress toIpAddress(const asio::ip::address& a) {
  policy::IpAddress out;
  out.bytes = addressBytes(a, out.v6);
  return out;
}

asio::ip::address toAsioAddress(const policy::IpAddress& a) {
  return addressFromBytes(a.v6, a.bytes);
}

namespace {

// An IPv4-mapped IPv6 address as the IPv4 address it reaches.
policy::IpAddress unmapped(const policy::IpAddress& a) {
  if (!a.v6) return a;
  for (int i = 0; i < 10; ++i) {
    if (a.bytes[i] != 0) return a;
  }
  if (a.bytes[10] != 0xff || a.bytes[11] != 0xff) return a;
  policy::IpAddress v4;
  std::copy(a.bytes.begin() + 12, a.bytes.end(), v4.bytes.begin());
  return v4;
}

bool isLocalOrAny(const policy::IpAddress& a) {
  auto cls = policy::classify(a).cls;
  return cls == policy::AddressClass::kLoopback || cls == policy::AddressClass::kUnspecified;
}

// Would dialling addr:port reach one of sandgate's own listeners? A listener on a wildcard
// or loopback address is reached through any loopback or unspecified destination.
bool isOwnListener(const policy::IpAddress& addr, uint16_t port,
                   const std::vector<OwnEndpoint>& own) {
  auto a = unmapped(addr);
  for (const auto& e : own) {
    if (e.port != port) continue;
    auto l = unmapped(e.address);
    if (l == a) return true;
    if (isLocalOrAny(l) && isLocalOrAny(a)) return true;
  }
  return false;
}

std::string addrText(const policy::IpAddress& a, uint16_t port) {
  return a.v6 ? fmt::format("[{}]:{}", a.str(), port) : fmt::format("{}:{}", a.str(), port);
}

DialResult failure(int status, std::string_view reason, std::string detail,
                   const policy::Decision& d) {
  DialResult r;
  r.status = status;
  r.reason = reason;
  r.detail = std::move(detail);
  r.decision = d;
  return r;
}

}  // namespace

namespace {

// The target's addresses, each vetted (deny ranges, deny rules, sandgate's own listeners), or
// the refusal or failure that ends the request. Only vetted addresses are ever dialled or asked
// of a parent.
struct Vetted {
  std::vector<std::pair<policy::IpAddress, policy::Decision>> addresses;
  uint16_t port = 0;  // a resolve: override may change it
  std::optional<DialResult> failure;
};

asio::awaitable<Vetted> resolveAndVet(const Snapshot& snap, const policy::Decision& allowed,
                                      const policy::Target& target, uint16_t port,
                                      const std::vector<OwnEndpoint>& own,
                                      std::chrono::steady_clock::duration timeout) {
  auto ex = co_await asio::this_coro::executor;
  Vetted out;
  std::vector<policy::IpAddress> addresses;
  uint16_t dialPort = port;
  if (target.isAddress) {
    addresses.push_back(target.address);
  } else if (auto it = snap.resolve.find(target.name); it != snap.resolve.end()) {
    addresses.push_back(it->second.address);
    if (it->second.port) dialPort = *it->second.port;
  } else {
    tcp::resolver resolver(ex);
    asio::steady_timer timer(ex, timeout);
    const std::string service = std::to_string(port);  // named: see refuse() in session.cc
    auto result =
        co_await (resolver.async_resolve(target.name, service, kUse) || timer.async_wait(kUse));
    if (result.index() == 1) {
      out.failure = failure(504, reason::kUpstreamTimeout,
                            fmt::format("resolving {} timed out", target.name), allowed);
      co_return out;
    }
    auto [ec, results] = std::get<0>(std::move(result));
    if (ec) {
      out.failure =
          failure(502, reason::kDnsFailed,
                  fmt::format("resolving {} failed: {}", target.name, ec.message()), allowed);
      co_return out;
    }
    for (const auto& entry : results) {
      auto a = toIpAddress(entry.endpoint().address());
      if (std::find(addresses.begin(), addresses.end(), a) == addresses.end()) {
        addresses.push_back(a);
      }
    }
  }
  out.port = dialPort;
  if (addresses.empty()) {
    out.failure =
        failure(502, reason::kDnsFailed, fmt::format("{} has no addresses", target.name), allowed);
    co_return out;
  }

  // Vet every address before dialling any: only these are ever connected to.
  std::optional<DialResult> refusal;
  for (const auto& a : addresses) {
    auto d = snap.engine->checkAddress(allowed, a);
    if (!d.allowed()) {
      if (!refusal) {
        refusal = failure(
            403, d.reason,
            d.detail.empty() ? fmt::format("address {} is in a denied range", a.str()) : d.detail,
            d);
      }
      continue;
    }
    if (isOwnListener(a, dialPort, own)) {
      if (!refusal) {
        refusal = failure(403, reason::kProxyLoop,
                          fmt::format("{} is sandgate itself", addrText(a, dialPort)), d);
      }
      continue;
    }
    out.addresses.emplace_back(a, std::move(d));
  }
  if (out.addresses.empty()) out.failure = std::move(refusal);
  co_return out;
}

parent::TunnelTarget tunnelTo(const policy::IpAddress& a, uint16_t port) {
  parent::TunnelTarget t;
  t.isAddress = true;
  t.v6 = a.v6;
  t.host = a.str();
  t.addressBytes.assign(a.bytes.begin(), a.bytes.begin() + (a.v6 ? 16 : 4));
  t.port = port;
  return t;
}

// The upstream leg through the chain's parents, in order; a parent that cannot be reached
// (and only that) passes the request to the next one. Parents marked down are tried after the
// healthy ones, so a chain whose parents are all down still gets an attempt.
asio::awaitable<DialResult> dialViaParents(const Snapshot& snap, const policy::Decision& allowed,
                                           const policy::Target& target, uint16_t port,
                                           const std::vector<OwnEndpoint>& own,
                                           const std::vector<const config::UpstreamProxy*>& chain,
                                           config::Seconds connectTimeout, Metrics* metrics,
                                           bool plainHttp) {
  const auto timeout =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(connectTimeout);
  const auto now = std::chrono::steady_clock::now();
  std::vector<const config::UpstreamProxy*> order;
  for (const auto* p : chain) {
    if (parent::Health::of(*p).up(now)) order.push_back(p);
  }
  for (const auto* p : chain) {
    if (!parent::Health::of(*p).up(now)) order.push_back(p);
  }
  // A name the parent resolves is asked for by name; anything sandgate resolves (resolve:
  // local, a resolve: override, a literal address) is vetted here and asked for by address.
  const bool overridden = !target.isAddress && snap.resolve.contains(target.name);
  std::optional<Vetted> vetted;
  DialResult last = failure(502, reason::kParentUnreachable, "no parent to try", allowed);
  for (const auto* p : order) {
    // Plain http:// to a parent that resolves: the parent gets the request itself, by name,
    // and resolves it (nothing to vet here); anything else goes through a tunnel.
    const bool absolute = plainHttp && absoluteFormParent(snap, *p, target);
    parent::TunnelTarget tt;
    policy::Decision decision = allowed;
    if (!absolute && (target.isAddress || overridden ||
                      p->resolve == config::UpstreamProxy::Resolve::kLocal)) {
      if (!vetted) vetted = co_await resolveAndVet(snap, allowed, target, port, own, timeout);
      if (vetted->failure) co_return std::move(*vetted->failure);
      tt = tunnelTo(vetted->addresses.front().first, vetted->port);
      decision = vetted->addresses.front().second;
    } else {
      tt.host = target.name;
      tt.port = port;
    }
    const std::string text = tt.isAddress ? addrText(vetted->addresses.front().first, tt.port)
                                          : fmt::format("{}:{}", tt.host, tt.port);
    const auto started = std::chrono::steady_clock::now();
    auto r = co_await parent::dialThrough(snap, *p, absolute ? nullptr : &tt, connectTimeout,
                                          metrics);
    if (r.ok()) {
      parent::Health::of(*p).succeeded();
      if (metrics) {
        metrics->upstreamConnectSeconds(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
            p->name);
      }
      DialResult ok;
      ok.decision = std::move(decision);
      ok.upstream = text;
      ok.parent = p->name;
      ok.absoluteForm = absolute;
      ok.socket = std::move(r.socket);
      co_return ok;
    }
    if (metrics) metrics->parentFailure(p->name, r.reason);
    if (r.tryNext) parent::Health::of(*p).failed(std::chrono::steady_clock::now());
    last = failure(502, r.reason, std::move(r.detail), decision);
    last.upstream = text;
    last.parent = p->name;
    if (!r.tryNext) break;
  }
  (void)timeout;
  co_return last;
}

}  // namespace

bool absoluteFormParent(const Snapshot& snap, const config::UpstreamProxy& p,
                        const policy::Target& target) {
  return p.scheme != config::UpstreamProxy::Scheme::kSocks5 &&
         p.resolve == config::UpstreamProxy::Resolve::kParent && !target.isAddress &&
         !snap.resolve.contains(target.name);
}

asio::awaitable<DialResult> dialUpstream(const Snapshot& snap, const policy::Decision& allowed,
                                         const policy::Target& target, uint16_t port,
                                         const std::vector<OwnEndpoint>& own,
                                         config::Seconds connectTimeout, Metrics* metrics,
                                         bool plainHttp) {
  auto ex = co_await asio::this_coro::executor;
  const auto timeout =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(connectTimeout);
  if (auto chain = parent::chainFor(snap.config, allowed, target); !chain.empty()) {
    co_return co_await dialViaParents(snap, allowed, target, port, own, chain, connectTimeout,
                                      metrics, plainHttp);
  }
  auto vetted = co_await resolveAndVet(snap, allowed, target, port, own, timeout);
  if (vetted.failure) co_return std::move(*vetted.failure);
  const uint16_t dialPort = vetted.port;

  DialResult last = failure(502, reason::kUpstreamUnreachable, "no address to dial", allowed);
  for (auto& [addr, decision] : vetted.addresses) {
    boost::beast::tcp_stream stream(ex);
    stream.expires_after(timeout);
    auto started = std::chrono::steady_clock::now();
    tcp::endpoint ep(toAsioAddress(addr), dialPort);
    auto [ec] = co_await stream.async_connect(ep, kUse);
    std::string text = addrText(addr, dialPort);
    if (!ec) {
      if (metrics) {
        metrics->upstreamConnectSeconds(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      }
      DialResult ok;
      ok.decision = std::move(decision);
      ok.upstream = std::move(text);
      ok.socket.emplace(stream.release_socket());
      // Requests and responses are relayed as a header write and then body writes: without
      // TCP_NODELAY, Nagle holds the second small write until the peer's delayed ACK (~40 ms).
      boost::system::error_code ignored;
      ok.socket->set_option(tcp::no_delay(true), ignored);
      co_return ok;
    }
    if (ec == boost::beast::error::timeout) {
      last = failure(504, reason::kUpstreamTimeout, fmt::format("connecting to {} timed out", text),
                     decision);
    } else if (ec == asio::error::connection_refused) {
      last = failure(502, reason::kUpstreamRefused, fmt::format("{} refused the connection", text),
                     decision);
    } else {
      last = failure(502, reason::kUpstreamUnreachable,
                     fmt::format("connecting to {} failed: {}", text, ec.message()), decision);
    }
    last.upstream = text;
  }
  co_return last;
}

asio::awaitable<std::optional<tcp::socket>> dialForClient(ClientConnection& c,
                                                          const policy::Decision& allowed,
                                                          const policy::Target& target,
                                                          uint16_t port, RequestLog& log,
                                                          Refusal* refusal, bool plainHttp,
                                                          bool* absoluteForm) {
  auto& rec = log.record;
  auto own = c.state.ownEndpoints.load();
  auto dial = co_await dialUpstream(*c.snap, allowed, target, port, *own, c.limits().connectTimeout,
                                    c.state.metrics.get(), plainHttp);
  rec.upstream = dial.upstream;
  rec.parent = dial.parent;
  if (absoluteForm) *absoluteForm = dial.absoluteForm;
  if (dial.ok()) co_return std::move(dial.socket);
  rec.rule = dial.decision.rule;
  *refusal = Refusal{.status = dial.status,
                     .reason = dial.reason,
                     .task = c.task ? c.task->name : "",
                     .host = rec.host,
                     .rule = dial.decision.rule,
                     .detail = dial.detail,
                     // 403: an address the policy refuses; otherwise the dial failed.
                     .outcome = dial.status == 403 ? Outcome::kDeny : Outcome::kError};
  co_return std::nullopt;
}

}  // namespace sandgate::proxy
