// In-process Server with a task-bound listener handed over as a file descriptor
// (Server::adoptListener): its clients need no token and always act as that task.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "config/config.h"
#include "proxy/server/server.h"
#include "tests/unit/proxy/test_server.h"

namespace sandgate::proxy {
namespace {

class AdoptListenerTest : public ServerFixture {
 protected:
  void SetUp() override {
    ServerFixture::SetUp();
    upstreamFd_ = listenLoopback(&upstreamPort_);
    ASSERT_GE(upstreamFd_, 0);
    // The upstream is on loopback, so the allowing rule must open 127.0.0.0/8 on purpose.
    std::string yaml =
        "policies:\n"
        "  p:\n"
        "    allow:\n"
        "      - host: allowed.test\n"
        "        ports: [80]\n"
        "        cidrs: [127.0.0.0/8]\n"
        "tasks:\n"
        "  - name: bound\n"
        "    policy: p\n"
        "resolve:\n"
        "  allowed.test: 127.0.0.1:" +
        std::to_string(upstreamPort_) + "\n" + auditConfig();
    auto server = testServer(yaml, "adopt.yaml");
    ASSERT_TRUE(server.ok()) << server.errorText();
    server_ = std::move(server.value());
    int fd = listenLoopback(&proxyPort_);
    ASSERT_GE(fd, 0);
    auto adopted = server_->adoptListener(fd, "bound");
    ASSERT_TRUE(adopted.ok()) << adopted.errorText();
    server_->start();
  }

  void TearDown() override {
    ServerFixture::TearDown();
    if (upstreamFd_ >= 0) ::close(upstreamFd_);
  }

  int upstreamFd_ = -1;
  uint16_t upstreamPort_ = 0;
  uint16_t proxyPort_ = 0;
};

TEST_F(AdoptListenerTest, DeniedRequestIsAttributedToTheListenersTask) {
  auto r = tcpExchange(proxyPort_, "GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n",
                       false);
  EXPECT_EQ(r.rfind("HTTP/1.1 403 ", 0), 0u) << r;  // not 407: no token is needed here
  EXPECT_NE(r.find("X-Sandgate-Reason: no_matching_rule"), std::string::npos) << r;
  EXPECT_NE(r.find("\"task\":\"bound\""), std::string::npos) << r;
}

TEST_F(AdoptListenerTest, AllowedRequestReachesUpstreamWithoutProxyAuthorization) {
  std::string seen;
  std::thread upstream([&] {
    timeval tv{5, 0};
    ::setsockopt(upstreamFd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int c = ::accept(upstreamFd_, nullptr, nullptr);
    if (c < 0) return;
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    while (seen.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      seen.append(buf, static_cast<size_t>(n));
    }
    std::string resp = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
    ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
    ::close(c);
  });
  auto r = tcpExchange(proxyPort_,
                       "GET http://allowed.test/x?y=1 HTTP/1.1\r\nHost: allowed.test\r\n"
                       "Proxy-Authorization: Basic Zm9vOmJhcg==\r\nConnection: close\r\n\r\n",
                       false);
  upstream.join();
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_EQ(r.substr(r.size() - 5), "hello") << r;
  EXPECT_EQ(seen.rfind("GET /x?y=1 HTTP/1.1\r\n", 0), 0u) << seen;
  EXPECT_EQ(seen.find("Proxy-Authorization"), std::string::npos) << seen;
  server_->shutdown();
  server_->wait();
  server_.reset();
  auto audit = auditText();
  EXPECT_NE(audit.find("\"task\":\"bound\""), std::string::npos) << audit;
  EXPECT_NE(audit.find("\"kind\":\"forward\""), std::string::npos) << audit;
}

TEST(AdoptListener, RefusesANonListeningDescriptor) {
  auto server = testServer("tasks: []\n", "empty.yaml", 1);
  ASSERT_TRUE(server.ok()) << server.errorText();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_FALSE(server.value()->adoptListener(fd, "t").ok());
}

size_t threadCount() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

size_t lineCount(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// `sandgate run` creates its embedded server, forks the sandbox (which it refuses to do with a
// second thread) and only then starts the server: create() must start no thread, whatever the
// credentials (an exec source has a refresher thread), and start() must start the refresh.
TEST_F(ServerFixture, CreateStartsNoThreadAndStartStartsTheExecRefresh) {
  const std::string runs = dir_ + "/runs";
  const std::string yaml =
      "credentials:\n"
      "  x:\n"
      "    source:\n"
      "      exec: [/bin/sh, -c, 'echo run >> \"$0\"; echo token-$(wc -l < \"$0\")', " +
      runs +
      "]\n"
      "      ttl: 100ms\n"
      "    hosts: [x.test]\n"
      "    inject: {header: Authorization, value: 'Bearer {secret}'}\n"
      "policies:\n"
      "  p:\n"
      "    allow:\n"
      "      - host: x.test\n"
      "        credential: x\n"
      "tasks:\n"
      "  - name: t\n"
      "    policy: p\n" +
      auditConfig();
  const size_t before = threadCount();
  auto server = testServer(yaml, "threads.yaml");
  ASSERT_TRUE(server.ok()) << server.errorText();
  server_ = std::move(server.value());
  EXPECT_EQ(threadCount(), before);
  EXPECT_EQ(lineCount(runs), 1u);  // loaded once by create()
  server_->start();
  // Refreshed every 80 ms from now on (bounded wait: 20 s).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (lineCount(runs) < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(lineCount(runs), 3u);
}

}  // namespace
}  // namespace sandgate::proxy
