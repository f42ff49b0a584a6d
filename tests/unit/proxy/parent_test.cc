// Tests of proxy/parent/: the pure parts of the CONNECT and SOCKS5 handshakes and the choice
// of parents (via, upstream_proxy_direct, upstream_proxy_default). The handshakes against real
// parents (squid, a SOCKS5 server, hostile ones) are in tests/integration/test_parent_proxy.py.
#include <gtest/gtest.h>

#include "config/config.h"
#include "policy/host.h"
#include "proxy/parent/handshake.h"
#include "proxy/parent/parent_dial.h"

namespace sandgate::proxy::parent {
namespace {

TunnelTarget named(std::string host, uint16_t port) {
  TunnelTarget t;
  t.host = std::move(host);
  t.port = port;
  return t;
}

TunnelTarget address(std::string host, bool v6, std::vector<uint8_t> bytes, uint16_t port) {
  TunnelTarget t = named(std::move(host), port);
  t.isAddress = true;
  t.v6 = v6;
  t.addressBytes = std::move(bytes);
  return t;
}

config::Located<std::string> loc(std::string v) {
  config::Located<std::string> l;
  l.value = std::move(v);
  return l;
}

config::UpstreamProxy proxyNamed(std::string name) {
  config::UpstreamProxy p;
  p.name = std::move(name);
  p.host = "h";
  p.port = 9;
  return p;
}

TEST(ParentHandshake, StatusLine) {
  EXPECT_EQ(parseStatusLine("HTTP/1.1 200 Connection established\r\n\r\n"), 200);
  EXPECT_EQ(parseStatusLine("HTTP/1.0 407 Proxy Authentication Required\r\n"), 407);
  EXPECT_EQ(parseStatusLine("HTTP/1.1 200\r\n\r\n"), 200);
  EXPECT_FALSE(parseStatusLine("HTTP/2 200\r\n"));
  EXPECT_FALSE(parseStatusLine("HTTP/1.1 20x OK\r\n"));
  EXPECT_FALSE(parseStatusLine("HTTP/1.1 2000 OK\r\n"));
  EXPECT_FALSE(parseStatusLine("SSH-2.0-OpenSSH_9.2\r\n"));
  EXPECT_FALSE(parseStatusLine("HTTP/1.1 099 Low\r\n"));
}

TEST(ParentHandshake, ConnectRequestNamesTheVettedAddress) {
  TunnelTarget v4 = address("127.0.0.1", false, {127, 0, 0, 1}, 8443);
  EXPECT_EQ(connectRequest(v4, ""),
            "CONNECT 127.0.0.1:8443 HTTP/1.1\r\nHost: 127.0.0.1:8443\r\n\r\n");
  TunnelTarget v6 = address("::1", true, std::vector<uint8_t>(16, 0), 443);
  EXPECT_EQ(connectRequest(v6, "Basic dTpw"),
            "CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\nProxy-Authorization: Basic "
            "dTpw\r\n\r\n");
}

TEST(ParentHandshake, Socks5RequestAddressTypes) {
  TunnelTarget name = named("api.example", 443);
  auto r = socks5Request(name);
  ASSERT_TRUE(r);
  const std::vector<uint8_t> want = {5,   1,   0,   3,   11,  'a', 'p', 'i', '.',
                                     'e', 'x', 'a', 'm', 'p', 'l', 'e', 1,   0xbb};
  EXPECT_EQ(*r, want);
  TunnelTarget v4 = address("10.1.2.3", false, {10, 1, 2, 3}, 80);
  EXPECT_EQ(*socks5Request(v4), (std::vector<uint8_t>{5, 1, 0, 1, 10, 1, 2, 3, 0, 80}));
  TunnelTarget tooLong = named(std::string(256, 'a'), 1);
  EXPECT_FALSE(socks5Request(tooLong));
  TunnelTarget badBytes = address("x", true, {1, 2}, 1);
  EXPECT_FALSE(socks5Request(badBytes));
}

policy::Target target(std::string_view host) {
  auto t = policy::normalizeHost(host);
  EXPECT_TRUE(std::holds_alternative<policy::Target>(t));
  return std::get<policy::Target>(t);
}

TEST(ParentChoice, DirectEntries) {
  std::vector<config::Located<std::string>> direct = {loc("*.internal.example"),
                                                      loc(".corp.example"), loc("exact.example"),
                                                      loc("10.0.0.0/8"), loc("192.0.2.7")};
  EXPECT_TRUE(isDirect(direct, target("a.internal.example")));
  EXPECT_FALSE(isDirect(direct, target("internal.example")));  // *. is subdomains only
  EXPECT_TRUE(isDirect(direct, target("corp.example")));
  EXPECT_TRUE(isDirect(direct, target("x.y.corp.example")));
  EXPECT_FALSE(isDirect(direct, target("evilcorp.example")));  // a label boundary
  EXPECT_TRUE(isDirect(direct, target("EXACT.example.")));
  EXPECT_FALSE(isDirect(direct, target("sub.exact.example")));
  EXPECT_TRUE(isDirect(direct, target("10.9.8.7")));
  EXPECT_TRUE(isDirect(direct, target("192.0.2.7")));
  EXPECT_FALSE(isDirect(direct, target("192.0.2.8")));
  EXPECT_FALSE(isDirect(direct, target("11.0.0.1")));
}

TEST(ParentChoice, ViaThenDirectThenDefault) {
  config::Config cfg;
  cfg.upstream.proxies.push_back(proxyNamed("a"));
  cfg.upstream.proxies.push_back(proxyNamed("b"));
  cfg.upstream.defaults = {loc("b"), loc("a")};
  cfg.upstream.direct = {loc("*.internal.example")};
  policy::Decision d;
  auto names = [](const std::vector<const config::UpstreamProxy*>& v) {
    std::vector<std::string> out;
    for (const auto* p : v) out.push_back(p->name);
    return out;
  };
  EXPECT_EQ(names(chainFor(cfg, d, target("api.example"))), (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE(chainFor(cfg, d, target("x.internal.example")).empty());
  const std::vector<std::string> viaA = {"a"};
  d.via = &viaA;
  EXPECT_EQ(names(chainFor(cfg, d, target("x.internal.example"))), (std::vector<std::string>{"a"}));
  const std::vector<std::string> direct;
  d.via = &direct;
  EXPECT_TRUE(chainFor(cfg, d, target("api.example")).empty());
  config::Config none;
  EXPECT_TRUE(chainFor(none, policy::Decision{}, target("api.example")).empty());
}

TEST(ParentHealth, BackoffDoublesAndResets) {
  config::UpstreamProxy p = proxyNamed("health-test");
  auto& h = Health::of(p);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(h.up(t0));
  h.failed(t0);
  EXPECT_FALSE(h.up(t0 + std::chrono::milliseconds(500)));
  EXPECT_TRUE(h.up(t0 + std::chrono::seconds(1)));
  h.failed(t0);
  EXPECT_FALSE(h.up(t0 + std::chrono::milliseconds(1500)));
  EXPECT_TRUE(h.up(t0 + std::chrono::seconds(2)));
  for (int i = 0; i < 20; ++i) h.failed(t0);
  EXPECT_TRUE(h.up(t0 + std::chrono::seconds(60)));  // capped
  h.succeeded();
  EXPECT_TRUE(h.up(t0));
}

}  // namespace
}  // namespace sandgate::proxy::parent
