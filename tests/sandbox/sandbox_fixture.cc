// Test helpers for the launcher tests (temp dirs, fake proxy, output capture).
#include "tests/sandbox/sandbox_fixture.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace sandgate::sandbox::testing {

TempDir::TempDir(const std::string& base) {
  std::string tmpl = base + "/sandgate-test-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) std::abort();
  path_ = tmpl;
  chmod(path_.c_str(), 0755);  // the sandbox uid must be able to reach what lies inside
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

FakeProxy::~FakeProxy() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  for (int fd : fds_) close(fd);
}

void FakeProxy::adopt(std::vector<int> fds) {
  {
    std::lock_guard lock(mu_);
    fds_ = std::move(fds);
  }
  thread_ = std::thread([this] { serve(); });
}

std::vector<std::string> FakeProxy::requests() {
  std::lock_guard lock(mu_);
  return requests_;
}

size_t FakeProxy::listenerCount() {
  std::lock_guard lock(mu_);
  return fds_.size();
}

void FakeProxy::serve() {
  std::vector<pollfd> pfds;
  for (int fd : fds_) pfds.push_back({fd, POLLIN, 0});
  while (!stop_) {
    if (poll(pfds.data(), pfds.size(), 50) <= 0) continue;
    for (auto& p : pfds) {
      if (!(p.revents & POLLIN)) continue;
      int c = accept4(p.fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      timeval tv{5, 0};
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      std::string req;
      char buf[4096];
      for (int i = 0; i < 64 && req.find("\r\n\r\n") == std::string::npos; ++i) {
        ssize_t n = read(c, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      std::string line = req.substr(0, req.find("\r\n"));
      {
        std::lock_guard lock(mu_);
        requests_.push_back(line);
      }
      std::string body = std::string(kMarker) + " " + line + "\n";
      std::string resp = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                         "\r\nConnection: close\r\n\r\n" + body;
      (void)!write(c, resp.data(), resp.size());
      close(c);
    }
  }
}

static std::string readAll(int fd) {
  std::string out;
  lseek(fd, 0, SEEK_SET);
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Captured runCaptured(Options options, FakeProxy* proxy) {
  int out = memfd_create("sandbox-out", MFD_CLOEXEC);
  int err = memfd_create("sandbox-err", MFD_CLOEXEC);
  options.stdoutFd = out;
  options.stderrFd = err;
  auto cb = [proxy](std::vector<int> fds) {
    if (proxy != nullptr) {
      proxy->adopt(std::move(fds));
    } else {
      for (int fd : fds) close(fd);
    }
  };
  Captured c{run(options, cb), {}, {}};
  c.out = readAll(out);
  c.err = readAll(err);
  close(out);
  close(err);
  return c;
}

Options shell(const std::string& script, const std::string& workspace) {
  Options o;
  o.argv = {"/bin/sh", "-c", script};
  o.workspace = workspace;
  o.timeout = std::chrono::seconds(60);
  o.killGrace = std::chrono::seconds(2);
  return o;
}

bool isRoot() { return geteuid() == 0; }

}  // namespace sandgate::sandbox::testing
