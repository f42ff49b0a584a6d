// A network namespace of its own (lo up) standing for a sandbox's in the admin socket's unit
// tests: serve refuses sockets that live in its own namespace, so a test's "sandbox" sockets
// are made, and talked to, from threads that joined this one. Needs CAP_SYS_ADMIN (root).
#pragma once

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <utility>

namespace sandgate::proxy {

class TestNetns {
 public:
  TestNetns() {
    // unshare() moves only the calling thread; the namespace outlives it through fd_.
    std::thread t([this] {
      if (::unshare(CLONE_NEWNET) != 0) {
        error_ = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
        return;
      }
      int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      ifreq ifr{};
      std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
      bool up = s >= 0 && ::ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
      if (up) {
        ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
        up = ::ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
      }
      if (s >= 0) ::close(s);
      if (!up) {
        error_ = std::string("bring lo up: ") + std::strerror(errno);
        return;
      }
      fd_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) error_ = std::string("open the netns: ") + std::strerror(errno);
    });
    t.join();
  }
  ~TestNetns() {
    if (fd_ >= 0) ::close(fd_);
  }
  TestNetns(const TestNetns&) = delete;
  TestNetns& operator=(const TestNetns&) = delete;

  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }

  // Runs `f` on a thread inside the namespace and returns what it returned.
  template <typename F>
  auto run(F f) -> decltype(f()) {
    decltype(f()) result{};
    std::thread t([&] {
      if (::setns(fd_, CLONE_NEWNET) == 0) result = f();
    });
    t.join();
    return result;
  }

 private:
  int fd_ = -1;
  std::string error_;
};

// Skips the test when no namespace can be made (not root).
#define SANDGATE_NETNS_OR_SKIP(ns)                                                     \
  if (!(ns).ok())                                                                      \
  GTEST_SKIP() << "needs a network namespace standing for a sandbox's (run as root): " \
               << (ns).error()

}  // namespace sandgate::proxy
