// Loopback-only networking inside the sandbox and the listeners handed to the proxy.
#include "sandbox/network.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

void bringLoopbackUp() {
  int s = checkSys(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), "bring lo up", "socket");
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0) {
    int err = errno;
    close(s);
    throwSys("bring lo up", "ioctl(SIOCGIFFLAGS)", err);
  }
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) {
    int err = errno;
    close(s);
    throwSys("bring lo up", "ioctl(SIOCSIFFLAGS)", err);
  }
  close(s);
}


}  // namespace

int bindSocket(int type, const sockaddr* addr, socklen_t len, bool listenToo, std::string* call) {
  int s = socket(addr->sa_family, type | SOCK_CLOEXEC, 0);
  if (s < 0) {
    *call = "socket";
    return -1;
  }
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (addr->sa_family == AF_INET6 &&
      setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0) {
    *call = "setsockopt(IPV6_V6ONLY)";
  } else if (bind(s, addr, len) != 0) {
    *call = "bind";
  } else if (listenToo && listen(s, SOMAXCONN) != 0) {
    *call = "listen";
  } else {
    return s;
  }
  int err = errno;
  close(s);
  errno = err;
  return -1;
}

std::vector<int> setUpNetwork(uint16_t port, std::vector<std::string>* warnings) {
  bringLoopbackUp();
  std::vector<int> fds;
  std::string call;
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = htons(port);
  v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int s4 = bindSocket(SOCK_STREAM, reinterpret_cast<sockaddr*>(&v4), sizeof v4, true, &call);
  if (s4 < 0) throwSys("listen on 127.0.0.1:" + std::to_string(port), call);
  fds.push_back(s4);
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(port);
  v6.sin6_addr = in6addr_loopback;
  int s6 = bindSocket(SOCK_STREAM, reinterpret_cast<sockaddr*>(&v6), sizeof v6, true, &call);
  if (s6 >= 0) {
    fds.push_back(s6);
  } else if (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL) {
    warnings->push_back(sysFailure(
        "listen on [::1]:" + std::to_string(port) + " (IPv6 unavailable; IPv4 only)", call, errno));
  } else {
    int err = errno;
    close(s4);
    throwSys("listen on [::1]:" + std::to_string(port), call, err);
  }
  return fds;
}

}  // namespace sandgate::sandbox
