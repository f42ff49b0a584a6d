// CONNECT through the proxy, in-process, up to the spliced tunnel: a denied host (refused
// before any dial), a head in tiny pieces or cut short, the bytes a client sends right behind
// the head, a client gone before the tunnel is up (its tunnel slot comes back), and an upstream
// that refuses the connection. Each case asserts what the upstream saw (accepts, bytes) and
// what the client got, with the audit line and metrics.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "tests/unit/proxy/test_proxy.h"

namespace sandgate::proxy {
namespace {

constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";

// Sends back whatever arrives until the proxy ends the connection.
void echo(Wire& c, size_t) {
  for (int i = 0; i < 10000 && c.fill() > 0; ++i) {
    if (!c.send(c.buffered())) return;
    c.buffered().clear();
  }
}

class ConnectTest : public ProxyFixture {
 protected:
  // api.test (port 7000 is allowed, and is no TLS port: no ClientHello is expected) and
  // denied.test resolve to a plain upstream running `script`.
  void start(TestUpstream::Script script, ProxyConfig cfg = {}) {
    upstream_ = std::make_unique<TestUpstream>(std::move(script));
    ASSERT_TRUE(upstream_->ok());
    cfg.apiPort = upstream_->port();
    startProxy(cfg);
  }

  std::unique_ptr<TestUpstream> upstream_;
};

TEST_F(ConnectTest, DeniedHostIs403WithItsReasonAndNoDial) {
  start(echo);
  auto c = dialProxy();
  ASSERT_TRUE(c);
  // denied.test resolves to the upstream: a dial would show there.
  ASSERT_TRUE(c->send(connectHead("denied.test:443") + "early bytes"));
  auto r = expectRefusal(*c, 403, "no_matching_rule");
  EXPECT_EQ(r.field("Connection"), "close");
  std::string rest;
  EXPECT_TRUE(c->readToEnd(rest));
  upstream_->settle();
  EXPECT_EQ(upstream_->accepts(), 0u);
  auto line = waitAudit("refusal", "no_matching_rule");
  ASSERT_TRUE(line);
  EXPECT_EQ(text(*line, "method"), "CONNECT");
  EXPECT_EQ(text(*line, "host"), "denied.test");
  EXPECT_EQ(text(*line, "verdict"), "deny");
  EXPECT_EQ(number(*line, "status"), 403);
  EXPECT_EQ(number(*line, "bytes_up"), 0);
  EXPECT_EQ(requests("tunnel", "deny", "no_matching_rule"), 1);
}

TEST_F(ConnectTest, HeadInTinyPiecesOpensTheTunnel) {
  start(echo);
  auto c = dialProxy();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->sendInPieces(connectHead("api.test:7000"), 2));
  EXPECT_EQ(c->readExactly(kEstablished.size()), kEstablished);
  ASSERT_TRUE(c->send("ping"));
  EXPECT_EQ(c->readExactly(4), "ping");
  EXPECT_EQ(upstream_->accepts(), 1u);
  EXPECT_EQ(upstream_->received(0), "ping");
}

TEST_F(ConnectTest, HeadCutShortThenClosedDialsNothing) {
  start(echo);
  auto c = dialProxy();
  ASSERT_TRUE(c);
  const std::string head = connectHead("api.test:7000");
  ASSERT_TRUE(c->send(head.substr(0, head.size() - 3)));
  c->shutdownWrite();
  std::string answer;
  EXPECT_TRUE(c->readToEnd(answer));
  EXPECT_EQ(answer, "");
  upstream_->settle();
  EXPECT_EQ(upstream_->accepts(), 0u);
}

TEST_F(ConnectTest, BytesRightBehindTheHeadAreRelayedFirst) {
  start(echo);
  std::string answer;
  // One write: the head and the first bytes of the tunnel, which the proxy reads together.
  auto c = openTunnel("api.test:7000", &answer, "early-bytes\n");
  ASSERT_TRUE(c) << answer;
  EXPECT_EQ(answer, kEstablished);
  ASSERT_TRUE(c->send("later\n"));
  EXPECT_EQ(c->readExactly(18), "early-bytes\nlater\n");
  ASSERT_TRUE(upstream_->waitAccepts(1));
  EXPECT_EQ(upstream_->received(0), "early-bytes\nlater\n");
  c->shutdownWrite();
  std::string rest;
  EXPECT_TRUE(c->readToEnd(rest));
  auto line = waitAudit("tunnel", "allowed");
  ASSERT_TRUE(line);
  EXPECT_EQ(number(*line, "bytes_up"), 18);
  EXPECT_EQ(number(*line, "bytes_down"), 18);
  EXPECT_EQ(number(*line, "status"), 200);
}

TEST_F(ConnectTest, ClientGoneBeforeTheTunnelIsUpGivesItsSlotBack) {
  // One tunnel at a time: a slot the early close leaked would refuse the next CONNECT (429).
  start(echo, ProxyConfig{.maxTunnels = 1});
  {
    auto c = dialProxy();
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->send(connectHead("api.test:7000")));
    c->close();  // before the 200 has been read
  }
  auto line = waitAudit([](const boost::json::object& o) { return text(o, "host") == "api.test"; });
  ASSERT_TRUE(line);
  EXPECT_EQ(text(*line, "kind"), "tunnel");
  EXPECT_EQ(number(*line, "bytes_up"), 0);
  EXPECT_TRUE(waitMetric("sandgate_tunnels_active", {"task=\"t\""}, 0));
  EXPECT_TRUE(waitMetric("sandgate_connections_active", {"task=\"t\""}, 0));
  // Whatever the upstream accepted got nothing and was closed.
  for (size_t i = 0; i < upstream_->accepts(); ++i) {
    ASSERT_TRUE(upstream_->waitDone(i));
    EXPECT_EQ(upstream_->received(i), "");
    EXPECT_TRUE(upstream_->ended(i));
  }
  const size_t before = upstream_->accepts();
  std::string answer;
  auto c2 = openTunnel("api.test:7000", &answer);
  ASSERT_TRUE(c2) << answer;
  ASSERT_TRUE(c2->send("again"));
  EXPECT_EQ(c2->readExactly(5), "again");
  EXPECT_EQ(upstream_->accepts(), before + 1);
}

TEST_F(ConnectTest, UpstreamRefusingTheConnectionIs502) {
  // A bound socket that does not listen: the kernel answers its SYN with a reset. Kept open for
  // the test, so that no other process can take the port meanwhile.
  int refusing = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(0);
  ASSERT_EQ(::bind(refusing, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(refusing, reinterpret_cast<sockaddr*>(&a), &len);
  start(echo, ProxyConfig{.refusedPort = ntohs(a.sin_port)});
  auto c = dialProxy();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(connectHead("refused.test:7000") + "never relayed"));
  expectRefusal(*c, 502, "upstream_refused");
  auto line = expectAudit("refusal", "upstream_refused", "error");
  ASSERT_TRUE(line);
  EXPECT_EQ(text(*line, "host"), "refused.test");
  EXPECT_EQ(number(*line, "status"), 502);
  ::close(refusing);
}

}  // namespace
}  // namespace sandgate::proxy
