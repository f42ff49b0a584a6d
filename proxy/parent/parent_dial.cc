// Choosing parents, their health, and dialling through one (see parent_dial.h).
#include "proxy/parent/parent_dial.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>
#include <map>
#include <memory>

#include "broker/secret.h"
#include "broker/store.h"
#include "policy/ip.h"
#include "proxy/client/reasons.h"
#include "proxy/net/completion.h"
#include "proxy/net/endpoint.h"
#include "proxy/net/upstream_tls.h"
#include "proxy/observe/metrics.h"
#include "proxy/parent/tls_parent.h"

namespace sandgate::proxy::parent {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

namespace {

bool hasSuffix(std::string_view name, std::string_view suffix) {
  return name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix &&
         name[name.size() - suffix.size() - 1] == '.';
}

std::string lowered(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

}  // namespace

bool isDirect(const std::vector<config::Located<std::string>>& direct,
              const policy::Target& target) {
  for (const auto& e : direct) {
    const std::string_view v = e.value;
    if (v.find('/') != std::string_view::npos || policy::parseIp(v)) {
      if (!target.isAddress) continue;
      if (auto cidr = policy::parseCidr(v)) {
        if (cidr->contains(target.address)) return true;
      } else if (auto ip = policy::parseIp(v); ip && *ip == target.address) {
        return true;
      }
      continue;
    }
    if (target.isAddress) continue;
    if (v.substr(0, 2) == "*.") {
      if (hasSuffix(target.name, lowered(v.substr(2)))) return true;
    } else if (v.front() == '.') {
      const std::string suffix = lowered(v.substr(1));
      if (target.name == suffix || hasSuffix(target.name, suffix)) return true;
    } else if (target.name == lowered(v)) {
      return true;
    }
  }
  return false;
}

std::vector<const config::UpstreamProxy*> chainFor(const config::Config& cfg,
                                                   const policy::Decision& d,
                                                   const policy::Target& target) {
  std::vector<const config::UpstreamProxy*> out;
  const auto& u = cfg.upstream;
  if (u.proxies.empty()) return out;
  auto add = [&](const auto& names) {
    for (const auto& n : names) {
      if (const auto* p = u.find(n)) out.push_back(p);
    }
  };
  if (d.via) {
    add(*d.via);
    return out;
  }
  if (isDirect(u.direct, target)) return out;
  for (const auto& n : u.defaults) {
    if (const auto* p = u.find(n.value)) out.push_back(p);
  }
  return out;
}

// --- health ---

Health& Health::of(const config::UpstreamProxy& p) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Health>, std::less<>> all;
  std::lock_guard lock(mu);
  auto key = fmt::format("{}|{}|{}|{}", p.name, static_cast<int>(p.scheme), p.host, p.port);
  auto& h = all[key];
  if (!h) h = std::make_unique<Health>();
  return *h;
}

bool Health::up(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  return failures_ == 0 || now >= downUntil_;
}

void Health::failed(Clock::time_point now) {
  std::lock_guard lock(mu_);
  failures_ = std::min(failures_ + 1, 16);
  auto backoff = std::chrono::seconds(1) * (1 << std::min(failures_ - 1, 6));
  downUntil_ = now + std::min<Clock::duration>(backoff, std::chrono::seconds(60));
}

void Health::succeeded() {
  std::lock_guard lock(mu_);
  failures_ = 0;
}

int Health::failures() const {
  std::lock_guard lock(mu_);
  return failures_;
}

// --- dialling ---

namespace {

asio::ip::address asioAddress(const policy::IpAddress& a) {
  return addressFromBytes(a.v6, a.bytes);
}

ParentDial failure(std::string_view reason, std::string detail, bool tryNext) {
  ParentDial r;
  r.reason = reason;
  r.detail = std::move(detail);
  r.tryNext = tryNext;
  return r;
}

// "Basic base64(user:password)" for Proxy-Authorization. The result is secret: the caller
// wipes it.
std::string basicAuth(std::string_view userPassword) {
  std::string b64(4 * ((userPassword.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                          reinterpret_cast<const unsigned char*>(userPassword.data()),
                          static_cast<int>(userPassword.size()));
  b64.resize(n > 0 ? static_cast<size_t>(n) : 0);
  std::string out = "Basic " + b64;
  broker::wipe(b64);
  return out;
}

}  // namespace

std::optional<std::string> proxyAuthorization(const Snapshot& snap,
                                              const config::UpstreamProxy& p) {
  if (!p.credential) return std::string();
  auto fetch = snap.secrets ? snap.secrets->get(p.credential->value) : broker::Fetch{};
  if (!fetch.ok()) return std::nullopt;
  return basicAuth(fetch.secret->reveal());
}

asio::awaitable<ParentDial> dialThrough(const Snapshot& snap, const config::UpstreamProxy& p,
                                        const TunnelTarget* target, config::Seconds timeout,
                                        Metrics* metrics) {
  auto ex = co_await asio::this_coro::executor;
  const auto budget = std::chrono::duration_cast<Clock::duration>(timeout);
  asio::steady_timer deadline(ex, budget);
  const std::string name = fmt::format("parent `{}`", p.name);
  if (!target && p.scheme == config::UpstreamProxy::Scheme::kSocks5) {
    co_return failure(reason::kParentUnreachable,
                      fmt::format("{} is a SOCKS5 parent: it carries tunnels only", name), false);
  }

  // The secret first: a parent whose credential is unavailable is not tried without it.
  std::shared_ptr<const broker::Secret> secret;
  if (p.credential) {
    auto fetch = snap.secrets ? snap.secrets->get(p.credential->value) : broker::Fetch{};
    if (!fetch.ok()) {
      co_return failure(
          reason::kParentAuthFailed,
          fmt::format("{}: its credential `{}` is unavailable", name, p.credential->value), true);
    }
    secret = fetch.secret;
  }

  // The parent's addresses: a resolve: override, a literal, or DNS.
  std::vector<tcp::endpoint> endpoints;
  uint16_t port = p.port;
  if (auto it = snap.resolve.find(p.host); it != snap.resolve.end()) {
    if (it->second.port) port = *it->second.port;
    endpoints.emplace_back(asioAddress(it->second.address), port);
  } else if (auto ip = policy::parseIp(p.host)) {
    endpoints.emplace_back(asioAddress(*ip), port);
  } else {
    tcp::resolver resolver(ex);
    auto r = co_await (resolver.async_resolve(p.host, std::to_string(port), kUse) ||
                       deadline.async_wait(kUse));
    if (r.index() == 1) {
      co_return failure(reason::kParentUnreachable,
                        fmt::format("{}: resolving {} timed out", name, p.host), true);
    }
    auto [ec, results] = std::get<0>(std::move(r));
    if (ec) {
      co_return failure(reason::kParentUnreachable,
                        fmt::format("{}: resolving {} failed: {}", name, p.host, ec.message()),
                        true);
    }
    for (const auto& e : results) endpoints.push_back(e.endpoint());
  }

  std::optional<tcp::socket> sock;
  std::string lastError = "no address";
  const auto started = Clock::now();
  for (const auto& ep : endpoints) {
    tcp::socket s(ex);
    auto r = co_await (s.async_connect(ep, kUse) || deadline.async_wait(kUse));
    if (r.index() == 1) {
      lastError = "connecting timed out";
      break;
    }
    auto [ec] = std::get<0>(r);
    if (!ec) {
      sock.emplace(std::move(s));
      break;
    }
    lastError = ec.message();
  }
  if (!sock) {
    co_return failure(
        reason::kParentUnreachable,
        fmt::format("{} ({}:{}) could not be reached: {}", name, p.host, port, lastError), true);
  }
  if (metrics) {
    metrics->parentConnectSeconds(p.name,
                                  std::chrono::duration<double>(Clock::now() - started).count());
  }
  boost::system::error_code ignored;
  sock->set_option(tcp::no_delay(true), ignored);

  HandshakeResult hs;
  if (p.scheme == config::UpstreamProxy::Scheme::kSocks5) {
    std::optional<std::string_view> user;
    std::string_view password;
    if (secret) {
      // The secret is "user:password"; both go only to this parent, in RFC 1929's message.
      const std::string_view up = secret->reveal();
      auto colon = up.find(':');
      user = up.substr(0, colon);
      password = colon == std::string_view::npos ? std::string_view() : up.substr(colon + 1);
    }
    hs = co_await socks5Connect(*sock, deadline, *target, user, password);
  } else if (p.scheme == config::UpstreamProxy::Scheme::kHttps) {
    if (!snap.upstreamTls) {
      co_return failure(reason::kParentUnreachable, fmt::format("{}: no TLS context", name), true);
    }
    std::string auth;
    // Proxy-Authorization to this parent only, inside TLS; wiped once written. Without a
    // tunnel the route writes it into each request's head (proxyAuthorization()).
    if (secret && target) auth = basicAuth(secret->reveal());
    auto t = co_await connectOverTls(std::move(*sock), snap.upstreamTls->contextFor(""), p.host,
                                     deadline, target, auth);
    broker::wipe(auth);
    hs = std::move(t.hs);
    sock = std::move(t.socket);
  } else if (target) {
    std::string auth;
    // Proxy-Authorization to this parent only; wiped when the request has been written.
    if (secret) auth = basicAuth(secret->reveal());
    hs = co_await httpConnect(*sock, deadline, *target, auth);
    broker::wipe(auth);
  } else {
    hs.outcome = HandshakeOutcome::kOk;  // requests go to the parent itself, in absolute form
  }
  switch (hs.outcome) {
    case HandshakeOutcome::kOk: {
      ParentDial ok;
      ok.socket = std::move(sock);
      co_return ok;
    }
    case HandshakeOutcome::kAuthFailed:
      co_return failure(reason::kParentAuthFailed, fmt::format("{}: {}", name, hs.detail), false);
    case HandshakeOutcome::kRefused:
      co_return failure(reason::kParentRefused, fmt::format("{}: {}", name, hs.detail), false);
    case HandshakeOutcome::kBroken:
      break;
  }
  co_return failure(reason::kParentUnreachable, fmt::format("{}: {}", name, hs.detail), false);
}

}  // namespace sandgate::proxy::parent
