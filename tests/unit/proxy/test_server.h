// An in-process Server for the proxy unit tests (its config from YAML text, no signal
// handling, no config file watching), and the loopback sockets those tests talk to it with.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "common/result.h"
#include "config/config.h"
#include "proxy/server/server.h"

namespace sandgate::proxy {

// `name` is the config's file name in diagnostics. Not started.
inline Result<std::unique_ptr<Server>> testServer(const std::string& yaml, const std::string& name,
                                                  unsigned threads = 2) {
  auto cfg = config::loadString(yaml, name);
  if (!cfg) return cfg.errors();
  ServerOptions opts;
  opts.threads = threads;
  opts.handleSignals = false;
  opts.watchConfigFile = false;
  return Server::create(std::move(cfg.value()), std::move(opts));
}

inline sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

// A socket of `type` bound to 127.0.0.1 on an ephemeral port (listening when SOCK_STREAM);
// -1 on failure.
inline int boundLoopback(int type, uint16_t* port) {
  int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(0);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      (type == SOCK_STREAM && ::listen(fd, 16) != 0)) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

inline int listenLoopback(uint16_t* port) { return boundLoopback(SOCK_STREAM, port); }

// Sends `bytes` to 127.0.0.1:port (then half-closes, with `halfClose`) and returns everything
// received until EOF (5 s cap); empty when it could not connect or send.
inline std::string tcpExchange(uint16_t port, const std::string& bytes, bool halfClose) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a = loopback(port);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size())) {
    if (halfClose) ::shutdown(fd, SHUT_WR);
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// A fixture with a scratch directory (dir_, for the audit log) and a Server (server_) that is
// shut down and removed with the directory after each test.
class ServerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandgate-server-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }

  void TearDown() override {
    if (server_) {
      server_->shutdown();
      server_->wait();
      server_.reset();
    }
    std::system(("rm -rf " + dir_).c_str());
  }

  // The YAML lines that send the audit log to dir_.
  std::string auditConfig() const { return "audit:\n  path: " + dir_ + "/audit.log\n"; }

  std::string auditText() const {
    std::ifstream in(dir_ + "/audit.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::string dir_;
  std::unique_ptr<Server> server_;
};

}  // namespace sandgate::proxy
