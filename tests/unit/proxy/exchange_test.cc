// One request and its response through the proxy, in-process, both ways a request takes:
// forwarded (absolute-form http:// to a plain upstream) and intercepted (CONNECT, TLS to
// sandgate's leaf, origin-form inside, verified TLS to the upstream). Each case asserts what the
// upstream received, what the client received, and the audit line: a head in tiny pieces or cut
// short, a body cut by the client, a response cut, malformed or late from the upstream,
// keep-alive, pipelining, and credential injection.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/proxy/test_proxy.h"

namespace sandgate::proxy {
namespace {

enum class Via { kForward, kIntercept };

// How many times `needle` occurs in `hay`.
size_t count(const std::string& hay, std::string_view needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// Waits (at most 3 s) until `done` holds.
template <class F>
bool eventually(F done) {
  const auto end = std::chrono::steady_clock::now() + 3s;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// Answers each request with 200 and its request line as the body (at most 16 per connection).
void echoRequestLine(Wire& c, size_t) {
  for (int i = 0; i < 16; ++i) {
    auto req = readRequest(c);
    if (!req || !c.send(okResponse(req->head.substr(0, req->head.find("\r\n"))))) return;
  }
}

class ExchangeTest : public ProxyFixture, public ::testing::WithParamInterface<Via> {
 protected:
  bool intercepted() const { return GetParam() == Via::kIntercept; }

  // api.test's upstream runs `script` (over TLS when intercepted); then the proxy starts.
  void start(TestUpstream::Script script, ProxyConfig cfg = {}) {
    upstream_ =
        std::make_unique<TestUpstream>(std::move(script), intercepted() ? upstreamTls() : nullptr);
    ASSERT_TRUE(upstream_->ok());
    cfg.apiPort = upstream_->port();
    cfg.inspect = intercepted();
    startProxy(cfg);
  }

  // A client connection on which requests to api.test can be sent.
  std::unique_ptr<Wire> open() { return intercepted() ? openIntercepted() : dialProxy(); }

  // A request head for api.test: absolute-form when forwarded, origin-form in the tunnel.
  std::string head(std::string_view method, std::string_view path,
                   std::string_view fields = {}) const {
    const std::string target =
        intercepted() ? std::string(path) : "http://api.test" + std::string(path);
    return std::string(method) + " " + target + " HTTP/1.1\r\nHost: api.test\r\n" +
           std::string(fields) + "\r\n";
  }

  // The audit kind of a request that reached the upstream.
  std::string kind() const { return intercepted() ? "intercept" : "forward"; }

  // Ends the client's side and waits until the proxy has closed the connection: the session
  // is over (and has handed its upstream connection to the pool, when it may).
  static void finish(Wire& c) {
    c.shutdownWrite();
    std::string rest;
    EXPECT_TRUE(c.readToEnd(rest)) << "the proxy kept the connection open";
  }

  // A request on a new client connection is answered 200 `body`, and the upstream has had
  // `accepts` connections by then.
  void expectServedAnew(std::string_view path, std::string_view body, size_t accepts) {
    auto c = open();
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->send(head("GET", path)));
    auto r = readResponse(*c);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, body);
    EXPECT_EQ(upstream_->accepts(), accepts);
  }

  std::unique_ptr<TestUpstream> upstream_;
};

TEST_P(ExchangeTest, HeadInTinyPiecesIsOneRequest) {
  start(answerEach("hello"));
  auto c = open();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->sendInPieces(head("GET", "/split?q=1", "X-Test: pieces\r\n"), 2));
  auto r = readResponse(*c);
  EXPECT_TRUE(r.complete) << r.error;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
  const std::string seen = upstream_->received(0);
  EXPECT_EQ(seen.rfind("GET /split?q=1 HTTP/1.1\r\n", 0), 0u) << seen;
  EXPECT_NE(seen.find("\r\nX-Test: pieces\r\n"), std::string::npos) << seen;
  EXPECT_EQ(count(seen, "HTTP/1.1\r\n"), 1u) << seen;
  EXPECT_EQ(upstream_->accepts(), 1u);
  auto line = expectAudit(kind(), "allowed", "allow");
  ASSERT_TRUE(line);
  EXPECT_EQ(text(*line, "path"), "/split");
  EXPECT_EQ(number(*line, "status"), 200);
}

TEST_P(ExchangeTest, HeadCutShortThenClosedDialsNoUpstream) {
  start(answerEach("never"));
  auto c = open();
  ASSERT_TRUE(c);
  const std::string full = head("GET", "/cut");
  ASSERT_TRUE(c->send(full.substr(0, full.size() - 8)));
  c->shutdownWrite();
  std::string answer;
  EXPECT_TRUE(c->readToEnd(answer)) << "the proxy kept the connection open";
  EXPECT_EQ(answer, "");  // nothing to answer: the client left mid-head
  upstream_->settle();
  EXPECT_EQ(upstream_->accepts(), 0u);
  // Audited as a head the client cut short, never as a request.
  auto cutLine = [&] {
    for (const auto& line : auditLines()) {
      if (text(line, "reason") == "client_closed") return true;
    }
    return false;
  };
  EXPECT_TRUE(eventually(cutLine)) << "no client_closed line for the cut head";
  for (const auto& line : auditLines()) {
    EXPECT_NE(text(line, "path"), "/cut") << "a request line for a head that never ended";
  }
}

TEST_P(ExchangeTest, BodyCutByTheClientLeavesTheUpstreamConnectionUnpooled) {
  start(answerEach("ok"));
  {
    auto c = open();
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->send(head("POST", "/upload", "Content-Length: 100\r\n") + std::string(10, 'a')));
    ASSERT_TRUE(upstream_->waitAccepts(1));
    ASSERT_TRUE(
        eventually([&] { return upstream_->received(0).find("aaaaaaaaaa") != std::string::npos; }));
    c->abort();  // gone with 90 bytes of the body owed (no TLS close_notify either)
  }
  // The upstream connection holds a request cut short: the proxy must close it, not keep it.
  ASSERT_TRUE(upstream_->waitDone(0));
  EXPECT_TRUE(upstream_->ended(0));
  const std::string seen = upstream_->received(0);
  EXPECT_EQ(seen.rfind("POST /upload HTTP/1.1\r\n", 0), 0u) << seen;
  EXPECT_EQ(seen.substr(seen.find("\r\n\r\n")), "\r\n\r\n" + std::string(10, 'a'));
  auto line = expectAudit(kind(), "client_closed", "error");
  ASSERT_TRUE(line);
  EXPECT_EQ(number(*line, "bytes_up"), 10);

  expectServedAnew("/next", "ok", 2);
  EXPECT_EQ(upstream_->received(1).rfind("GET /next HTTP/1.1\r\n", 0), 0u);
}

// The upstream announces 100 bytes, sends 10 and closes (first connection only).
void cutAfterTenBytes(Wire& c, size_t index) {
  if (index > 0) return answerEach("whole")(c, index);
  if (!readRequest(c)) return;
  c.send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
}

TEST_P(ExchangeTest, UpstreamClosingMidBodyGivesTheClientACutResponse) {
  start(cutAfterTenBytes);
  auto c = open();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(head("GET", "/big")));
  auto r = readResponse(*c);
  ASSERT_TRUE(r.headDone) << r.error;
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.complete) << "a cut body looks complete";
  EXPECT_EQ(r.body, "0123456789");
  EXPECT_TRUE(c->ended()) << "the client connection stays open after a cut response";
  auto line = expectAudit(kind(), "upstream_reset", "error");
  ASSERT_TRUE(line);
  EXPECT_EQ(number(*line, "bytes_down"), 10);

  expectServedAnew("/again", "whole", 2);
}

TEST_P(ExchangeTest, UpstreamResetMidChunkGivesTheClientACutResponse) {
  // A chunked body cut inside its first chunk by a reset, once the client has the piece sent
  // (a reset may discard what the proxy has not read yet).
  auto clientHasPiece = std::make_shared<Signal>();
  start([clientHasPiece](Wire& c, size_t) {
    if (!readRequest(c)) return;
    c.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n0123456789");
    clientHasPiece->wait();
    c.abort();
  });
  auto c = open();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(head("GET", "/chunks")));
  auto part = c->readUntil("0123456789");
  clientHasPiece->set();
  ASSERT_TRUE(part);
  c->buffered().insert(0, *part);  // parsed with the rest below
  auto r = readResponse(*c);
  ASSERT_TRUE(r.headDone) << r.error;
  EXPECT_FALSE(r.complete) << "a cut chunked body looks complete";
  EXPECT_TRUE(c->ended());
  EXPECT_EQ(r.body, "0123456789");
  auto line = expectAudit(kind(), "upstream_reset", "error");
  ASSERT_TRUE(line);
}

// The upstream announces 100 bytes, sends 10, then sends nothing more and keeps the connection
// open until the proxy ends it (first connection only).
void stallAfterTenBytes(Wire& c, size_t index) {
  if (index > 0) return answerEach("whole")(c, index);
  if (!readRequest(c)) return;
  c.send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
  waitForEnd(c);
}

TEST_P(ExchangeTest, UpstreamStallingMidBodyIsCutAtTheIdleTimeoutAndNotPooled) {
  start(stallAfterTenBytes, ProxyConfig{.limits = "  idle_timeout: 400ms\n"});
  auto c = open();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(head("GET", "/slow")));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = readResponse(*c);
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(r.headDone) << r.error;
  EXPECT_FALSE(r.complete);
  EXPECT_EQ(r.body, "0123456789");
  EXPECT_TRUE(c->ended());
  EXPECT_GE(waited, 350ms);
  EXPECT_LT(waited, 3s);
  // The stalled connection still owes 90 bytes: closed by the proxy, never reused.
  ASSERT_TRUE(upstream_->waitDone(0));
  EXPECT_TRUE(upstream_->ended(0));
  auto line = expectAudit(kind(), "upstream_timeout", "error");
  ASSERT_TRUE(line);

  expectServedAnew("/again", "whole", 2);
}

TEST_P(ExchangeTest, UpstreamSilentPastTheIdleTimeoutIs504) {
  start(
      [](Wire& c, size_t) {
        if (readRequest(c)) waitForEnd(c);
      },
      ProxyConfig{.limits = "  idle_timeout: 400ms\n"});
  auto c = open();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(head("GET", "/silent")));
  const auto t0 = std::chrono::steady_clock::now();
  expectRefusal(*c, 504, "upstream_timeout");
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 350ms);
  EXPECT_LT(waited, 3s);
  ASSERT_TRUE(upstream_->waitDone(0));
  EXPECT_TRUE(upstream_->ended(0));
  auto line = waitAudit(kind(), "upstream_timeout");
  ASSERT_TRUE(line);
  EXPECT_EQ(number(*line, "status"), 504);
  EXPECT_EQ(text(*line, "verdict"), "error");
}

TEST_P(ExchangeTest, MalformedResponseHeadsAre502) {
  // Connection i gets kBad[i]; every one is answered 502 and dropped.
  static const std::vector<std::string> kBad = {
      "HTTP/1.1 200 OK\r\nNo colon in this line\r\n\r\n",
      "SSH-2.0-OpenSSH_9.6\r\n\r\n",
      "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
  };
  start([](Wire& c, size_t index) {
    if (index < kBad.size() && readRequest(c) && c.send(kBad[index])) waitForEnd(c);
  });
  for (size_t i = 0; i < kBad.size(); ++i) {
    SCOPED_TRACE(kBad[i]);
    auto c = open();
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->send(head("GET", "/bad")));
    auto r = expectRefusal(*c, 502, "upstream_bad_response");
    EXPECT_EQ(r.body.find("No colon"), std::string::npos);  // nothing of the bad head relayed
    ASSERT_TRUE(upstream_->waitDone(i));
    EXPECT_TRUE(upstream_->ended(i));
  }
  // One line each (the last may be written just after its client had the 502).
  std::vector<boost::json::object> lines;
  EXPECT_TRUE(eventually([&] {
    lines.clear();
    for (auto& line : auditLines()) {
      if (text(line, "reason") == "upstream_bad_response") lines.push_back(line);
    }
    return lines.size() == kBad.size();
  })) << lines.size();
  for (const auto& line : lines) {
    EXPECT_EQ(number(line, "status"), 502);
    EXPECT_EQ(text(line, "verdict"), "error");
  }
}

TEST_P(ExchangeTest, EarlyAnswerIsRelayedAndTheRestOfTheBodyIsNotSent) {
  // The upstream answers once it has the head, without waiting for the body. Once it has
  // spoken, the rest of the body must not reach it (it could take it for its next request):
  // the answer goes to the client and both connections end.
  constexpr size_t kBody = 4 * 1024 * 1024;
  start([](Wire& c, size_t) {
    if (!c.readUntil("\r\n\r\n") ||
        !c.send("HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\n\r\nbig!")) {
      return;
    }
    waitForEnd(c);  // reads what comes until the proxy closes
  });
  auto c = open();
  ASSERT_TRUE(c);
  const std::string body(kBody, 'b');
  std::thread writer([&] {
    c->send(head("POST", "/up", "Content-Length: " + std::to_string(kBody) + "\r\n") + body);
  });
  auto r = readResponse(*c);
  EXPECT_TRUE(r.complete) << r.error;
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.body, "big!");
  c->unblock();  // the writer may still be blocked sending what was never read
  writer.join();
  auto line = waitAudit(kind(), "allowed");
  ASSERT_TRUE(line);
  EXPECT_EQ(number(*line, "status"), 413);
  // Not the whole body: the relay stopped when the upstream spoke.
  EXPECT_LT(number(*line, "bytes_up"), static_cast<int64_t>(kBody));
  const std::string seen = upstream_->received(0);
  EXPECT_LT(seen.size() - (seen.find("\r\n\r\n") + 4), kBody);
}

// Every response comes with a second one behind it, as if the upstream (or something between)
// tried to answer the client's next request in advance.
void answerWithSurplus(Wire& c, size_t) {
  for (int i = 0; i < 4; ++i) {
    if (!readRequest(c)) return;
    c.send(
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
        "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nplanted");
  }
}

TEST_P(ExchangeTest, BytesAfterAResponseAreNeverTheNextAnswer) {
  start(answerWithSurplus);
  auto c = open();
  ASSERT_TRUE(c);
  for (const char* path : {"/a", "/b"}) {
    ASSERT_TRUE(c->send(head("GET", path)));
    auto r = readResponse(*c);
    EXPECT_TRUE(r.complete) << r.error;
    EXPECT_EQ(r.body, "hello") << path;
  }
  // The upstream connection with bytes left over is dropped, never pooled: one per request.
  EXPECT_EQ(upstream_->accepts(), 2u);
}

TEST_P(ExchangeTest, KeepAliveReusesOneUpstreamConnection) {
  start(echoRequestLine);
  {
    auto c = open();
    ASSERT_TRUE(c);
    for (const char* path : {"/one", "/two"}) {
      ASSERT_TRUE(c->send(head("GET", path)));
      auto r = readResponse(*c);
      EXPECT_TRUE(r.complete) << r.error;
      EXPECT_EQ(r.body, std::string("GET ") + path + " HTTP/1.1");
    }
    finish(*c);
  }
  // A new client connection of the same task takes the idle upstream connection.
  auto c2 = open();
  ASSERT_TRUE(c2);
  ASSERT_TRUE(c2->send(head("GET", "/three")));
  auto r = readResponse(*c2);
  EXPECT_EQ(r.body, "GET /three HTTP/1.1");
  EXPECT_EQ(upstream_->accepts(), 1u);
  const std::string seen = upstream_->received(0);
  const size_t one = seen.find("GET /one "), two = seen.find("GET /two "),
               three = seen.find("GET /three ");
  EXPECT_TRUE(one < two && two < three && three != std::string::npos) << seen;
}

TEST_P(ExchangeTest, PipelinedRequestsAreAnsweredInOrder) {
  start(echoRequestLine);
  auto c = open();
  ASSERT_TRUE(c);
  // A request with a body and one more right behind it, in one write.
  ASSERT_TRUE(
      c->send(head("POST", "/first", "Content-Length: 3\r\n") + "abc" + head("GET", "/second")));
  auto r1 = readResponse(*c);
  auto r2 = readResponse(*c);
  EXPECT_TRUE(r1.complete && r2.complete) << r1.error << r2.error;
  EXPECT_EQ(r1.body, "POST /first HTTP/1.1");
  EXPECT_EQ(r2.body, "GET /second HTTP/1.1");
  EXPECT_EQ(upstream_->accepts(), 1u);
  const std::string seen = upstream_->received(0);
  const size_t body = seen.find("\r\n\r\nabc");
  EXPECT_NE(body, std::string::npos) << seen;
  EXPECT_EQ(seen.find("GET /second HTTP/1.1\r\n"), body + 7) << seen;
}

TEST_P(ExchangeTest, PlaceholderIsReplacedAndNeverReachesTheUpstream) {
  // The upstream echoes the Authorization it got: the client must get the placeholder back.
  start(
      [](Wire& c, size_t) {
        for (int i = 0; i < 4; ++i) {
          auto req = readRequest(c);
          if (!req) return;
          c.send(okResponse("auth=" + headerValue(req->head, "Authorization").value_or("none")));
        }
      },
      ProxyConfig{.credential = true});
  auto c = open();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send(head("GET", "/v1/models", "Authorization: Bearer " + placeholder_ + "\r\n")));
  auto r = readResponse(*c);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "auth=Bearer " + placeholder_);
  EXPECT_EQ(r.body.find(kTestSecret), std::string::npos);
  const std::string seen = upstream_->received(0);
  EXPECT_NE(seen.find("\r\nAuthorization: Bearer " + std::string(kTestSecret) + "\r\n"),
            std::string::npos)
      << seen;
  EXPECT_EQ(seen.find(placeholder_), std::string::npos) << seen;
  auto line = waitAudit(kind(), "allowed");
  ASSERT_TRUE(line);
  EXPECT_EQ(text(*line, "credential"), "api");
  EXPECT_TRUE(line->at("injected").as_bool());
  EXPECT_EQ(metric("sandgate_credential_injections_total",
                   {"task=\"t\"", "credential=\"api\"", "result=\"ok\"", "how=\"placeholder\""}),
            1);
}

INSTANTIATE_TEST_SUITE_P(Both, ExchangeTest, ::testing::Values(Via::kForward, Via::kIntercept),
                         [](const auto& info) {
                           return info.param == Via::kForward ? "Forward" : "Intercept";
                         });

}  // namespace
}  // namespace sandgate::proxy
