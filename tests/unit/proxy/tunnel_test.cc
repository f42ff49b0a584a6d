// The spliced relay of a CONNECT sandgate does not intercept, in-process: megabytes both ways
// at once arrive intact, a half-close travels to the other side while the other direction goes
// on, an idle tunnel is closed after limits.idle_timeout (and activity keeps it open), and on
// port 443 the ClientHello must name the CONNECT host: a server name for another host ends the
// tunnel before any byte of it reaches the upstream (a hello without SNI passes, as
// proxy/tunnel/connect.cc documents).
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "tests/unit/proxy/test_proxy.h"

namespace sandgate::proxy {
namespace {

constexpr size_t kBig = 8u << 20;

// `size` bytes that differ with `seed` and along their length (a misplaced or lost piece shows).
std::string pattern(size_t size, uint32_t seed) {
  std::string out(size, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (auto& ch : out) {
    x = x * 1664525u + 1013904223u;
    ch = static_cast<char>(x >> 24);
  }
  return out;
}

// The first flight of a TLS client naming `sni` (none when empty): its ClientHello, made
// in memory so that a test can send it with the CONNECT head or watch where it goes.
std::string clientHello(const std::string& sni) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  SSL* ssl = SSL_new(ctx.get());
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  if (!sni.empty()) SSL_set_tlsext_host_name(ssl, sni.c_str());
  SSL_connect(ssl);  // wants the server's answer: the hello is in `out`
  char* data = nullptr;
  const long n = BIO_get_mem_data(out, &data);
  std::string hello(data, static_cast<size_t>(n));
  SSL_free(ssl);
  return hello;
}

// Records what arrives until the proxy ends the connection.
void record(Wire& c, size_t) { waitForEnd(c); }

class TunnelTest : public ProxyFixture {
 protected:
  // api.test resolves to an upstream running `script` (TLS with a leaf for api.test when `tls`).
  void start(TestUpstream::Script script, ProxyConfig cfg = {}, bool tls = false) {
    upstream_ = std::make_unique<TestUpstream>(std::move(script), tls ? upstreamTls() : nullptr);
    ASSERT_TRUE(upstream_->ok());
    cfg.apiPort = upstream_->port();
    startProxy(cfg);
  }

  // The proxy ends the tunnel on `c` with nothing sent back, and the upstream it dialled
  // before the 200 has not had one byte of it.
  void expectEndedBeforeTheUpstream(Wire& c) {
    std::string got;
    EXPECT_TRUE(c.readToEnd(got)) << "the tunnel stayed open";
    EXPECT_EQ(got, "");
    ASSERT_TRUE(upstream_->waitDone(0));
    EXPECT_EQ(upstream_->received(0), "");
  }

  std::unique_ptr<TestUpstream> upstream_;
};

TEST_F(TunnelTest, EightMegabytesEachWayAtOnceArriveIntact) {
  const std::string up = pattern(kBig, 1), down = pattern(kBig, 2);
  start([down](Wire& c, size_t) {
    std::thread writer([&] {
      if (c.send(down)) c.shutdownWrite();
    });
    waitForEnd(c);  // the client's half-close, once all of `up` has come
    writer.join();
  });
  std::string answer;
  auto c = openTunnel("api.test:7000", &answer);
  ASSERT_TRUE(c) << answer;
  std::thread writer([&] {
    if (c->send(up)) c->shutdownWrite();
  });
  std::string got;
  const bool ended = c->readToEnd(got, 2 * kBig);
  writer.join();
  EXPECT_TRUE(ended);
  EXPECT_EQ(got.size(), kBig);
  EXPECT_TRUE(got == down) << "the bytes from the upstream changed on the way";
  ASSERT_TRUE(upstream_->waitDone(0));
  const std::string seen = upstream_->received(0);
  EXPECT_EQ(seen.size(), kBig);
  EXPECT_TRUE(seen == up) << "the bytes from the client changed on the way";
  auto line = waitAudit("tunnel", "allowed");
  ASSERT_TRUE(line);
  EXPECT_EQ(number(*line, "bytes_up"), static_cast<int64_t>(kBig));
  EXPECT_EQ(number(*line, "bytes_down"), static_cast<int64_t>(kBig));
  EXPECT_EQ(metric("sandgate_bytes_total", {"task=\"t\"", "direction=\"up\""}), kBig);
  EXPECT_EQ(metric("sandgate_bytes_total", {"task=\"t\"", "direction=\"down\""}), kBig);
}

TEST_F(TunnelTest, ClientHalfCloseReachesTheUpstreamWhichMayStillAnswer) {
  start([](Wire& c, size_t) {
    std::string request;
    if (c.readToEnd(request) && request == "request") c.send("response");
  });
  auto c = openTunnel("api.test:7000");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send("request"));
  c->shutdownWrite();
  std::string got;
  EXPECT_TRUE(c->readToEnd(got));
  EXPECT_EQ(got, "response");  // sent after the upstream saw the client's end
  ASSERT_TRUE(upstream_->waitDone(0));
  EXPECT_EQ(upstream_->received(0), "request");
  EXPECT_EQ(upstream_->ended(0), true);
}

TEST_F(TunnelTest, UpstreamHalfCloseReachesTheClientWhichMayStillSend) {
  start([](Wire& c, size_t) {
    if (!c.send("banner")) return;
    c.shutdownWrite();
    waitForEnd(c);
  });
  auto c = openTunnel("api.test:7000");
  ASSERT_TRUE(c);
  std::string got;
  EXPECT_TRUE(c->readToEnd(got)) << "the upstream's end did not reach the client";
  EXPECT_EQ(got, "banner");
  ASSERT_TRUE(c->send("after the banner"));
  c->shutdownWrite();
  ASSERT_TRUE(upstream_->waitDone(0));
  EXPECT_EQ(upstream_->received(0), "after the banner");
  EXPECT_TRUE(upstream_->ended(0));
}

// A reset on one side reaches the other as a reset, never as the end of the stream: a plain
// TCP stream cut short would otherwise look whole to the client.
TEST_F(TunnelTest, UpstreamResetReachesTheClientAsAReset) {
  std::promise<void> delivered;
  auto seen = delivered.get_future().share();
  start([seen](Wire& c, size_t) {
    if (!c.send("the first half")) return;
    seen.wait_for(10s);  // the client has the bytes before the reset, so none are lost to it
    c.abort();
  });
  auto c = openTunnel("api.test:7000");
  ASSERT_TRUE(c);
  ASSERT_EQ(c->readExactly(14).value_or(""), "the first half");
  delivered.set_value();
  std::string got;
  EXPECT_TRUE(c->readToEnd(got));
  EXPECT_EQ(got, "");
  EXPECT_EQ(c->endedBy(), "reset") << "the upstream's reset reached the client as an end";
  auto line = waitAudit("tunnel", "allowed");
  ASSERT_TRUE(line);
  EXPECT_TRUE(line->contains("error"));
}

TEST_F(TunnelTest, ClientResetReachesTheUpstreamAsAReset) {
  start([](Wire& c, size_t) {
    std::string got;
    c.readToEnd(got);
  });
  auto c = openTunnel("api.test:7000");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send("hello"));
  // Once the upstream has the bytes, the client resets.
  for (int i = 0; i < 500 && upstream_->received(0) != "hello"; ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(upstream_->received(0), "hello");
  c->abort();
  ASSERT_TRUE(upstream_->waitDone(0));
  EXPECT_EQ(upstream_->endedBy(0), "reset") << "the client's reset reached the upstream as an end";
}

TEST_F(TunnelTest, IdleTunnelIsClosedAfterTheIdleTimeoutAndTrafficKeepsItOpen) {
  start(
      [](Wire& c, size_t) {
        for (int i = 0; i < 100 && c.fill() > 0; ++i) {
          if (!c.send(c.buffered())) return;
          c.buffered().clear();
        }
      },
      ProxyConfig{.limits = "  idle_timeout: 300ms\n"});
  auto c = openTunnel("api.test:7000");
  ASSERT_TRUE(c);
  const auto opened = std::chrono::steady_clock::now();
  // Twice the idle timeout with traffic every 100 ms: still open.
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(c->send("x"));
    ASSERT_EQ(c->readExactly(1), "x") << "closed while in use, after round " << i;
    std::this_thread::sleep_for(100ms);
  }
  const auto quiet = std::chrono::steady_clock::now();
  EXPECT_GE(quiet - opened, 600ms);
  std::string rest;
  EXPECT_TRUE(c->readToEnd(rest)) << "the idle tunnel stayed open";
  const auto closed = std::chrono::steady_clock::now();
  EXPECT_EQ(rest, "");
  EXPECT_GE(closed - quiet, 150ms);  // the last round's sleep already counts as idle
  EXPECT_LT(closed - quiet, 3s);
  ASSERT_TRUE(upstream_->waitDone(0));
  EXPECT_TRUE(upstream_->ended(0));
  auto line = waitAudit("tunnel", "idle_timeout");
  ASSERT_TRUE(line);
  EXPECT_EQ(number(*line, "bytes_up"), 6);
  EXPECT_EQ(number(*line, "bytes_down"), 6);
}

TEST_F(TunnelTest, ServerNameOfAnotherHostEndsTheTunnelBeforeTheUpstreamSeesIt) {
  start(record);
  std::string answer;
  auto c = openTunnel("api.test:443", &answer);
  ASSERT_TRUE(c) << answer;
  ASSERT_TRUE(c->send(clientHello("other.test")));
  expectEndedBeforeTheUpstream(*c);
  auto line = expectAudit("tunnel", "sni_mismatch", "deny");
  ASSERT_TRUE(line);
  EXPECT_NE(text(*line, "error").find("'other.test'"), std::string::npos) << text(*line, "error");
  EXPECT_EQ(number(*line, "bytes_up"), 0);
  EXPECT_EQ(requests("tunnel", "deny", "sni_mismatch"), 1);
}

TEST_F(TunnelTest, ServerNameOfAnotherHostSentWithTheConnectHeadIsCheckedToo) {
  start(record);
  std::string answer;
  auto c = openTunnel("api.test:443", &answer, clientHello("other.test"));
  ASSERT_TRUE(c) << answer;
  expectEndedBeforeTheUpstream(*c);
  EXPECT_TRUE(waitAudit("tunnel", "sni_mismatch"));
}

TEST_F(TunnelTest, HelloNamingTheConnectHostIsRelayedAsItCame) {
  start(record);
  const std::string hello = clientHello("api.test");
  auto c = openTunnel("api.test:443", nullptr, hello);  // with the head: the early-bytes path
  ASSERT_TRUE(c);
  ASSERT_TRUE(upstream_->waitAccepts(1));
  c->shutdownWrite();
  ASSERT_TRUE(upstream_->waitDone(0));
  EXPECT_TRUE(upstream_->received(0) == hello) << "the ClientHello changed on the way";
}

TEST_F(TunnelTest, HelloInTinyPiecesIsCheckedWholeAndRelayedAsItCame) {
  start(record);
  const std::string hello = clientHello("api.test");
  auto c = openTunnel("api.test:443");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->sendInPieces(hello, 7));
  ASSERT_TRUE(upstream_->waitAccepts(1));
  c->shutdownWrite();
  ASSERT_TRUE(upstream_->waitDone(0));
  EXPECT_TRUE(upstream_->received(0) == hello)
      << upstream_->received(0).size() << " of " << hello.size() << " bytes";
}

TEST_F(TunnelTest, HelloCutShortThenClosedReachesNoUpstream) {
  start(record);
  const std::string hello = clientHello("api.test");
  auto c = openTunnel("api.test:443");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(hello.substr(0, hello.size() / 2)));
  c->shutdownWrite();
  expectEndedBeforeTheUpstream(*c);
  auto line = expectAudit("tunnel", "client_closed", "error");
  ASSERT_TRUE(line);
}

TEST_F(TunnelTest, TlsThroughTheTunnelWorksWithTheRightNameOrNone) {
  start(answerEach("through"), ProxyConfig{}, /*tls=*/true);
  for (const std::string sni : {"api.test", ""}) {
    SCOPED_TRACE("SNI '" + sni + "'");
    auto c = openTunnel("api.test:443");
    ASSERT_TRUE(c);
    // The client verifies the upstream's own certificate: sandgate does not intercept here.
    ASSERT_TRUE(c->startTlsClient(upstreamClientTls(), sni, "api.test"));
    ASSERT_TRUE(c->send("GET / HTTP/1.1\r\nHost: api.test\r\n\r\n"));
    auto r = readResponse(*c);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "through");
  }
  EXPECT_EQ(upstream_->accepts(), 2u);
}

TEST_F(TunnelTest, PlaintextIntoATlsTunnelIsRefused) {
  start(record);
  auto c = openTunnel("api.test:443");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send("GET / HTTP/1.1\r\nHost: api.test\r\n\r\n"));
  expectEndedBeforeTheUpstream(*c);
  auto line = expectAudit("tunnel", "not_tls", "deny");
  ASSERT_TRUE(line);
}

}  // namespace
}  // namespace sandgate::proxy
