// The admin socket's checks (see admin_protocol.h): who the peer is (SO_PEERCRED,
// SO_PEERGROUPS) and may it ask, and whether a descriptor it hands over is what a sandbox
// would hand over (a listener or DNS socket on loopback, in the sandbox's network namespace).
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "proxy/admin/admin_protocol.h"

namespace sandgate::proxy {

Result<PeerCredentials> peerCredentials(int fd) {
  auto fail = [](const char* what) {
    return Diagnostic{"", 0, 0, "",
                      fmt::format("{}: {} (errno {})", what, std::strerror(errno), errno)};
  };
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return fail("SO_PEERCRED");
  PeerCredentials peer{cred.pid, cred.uid, cred.gid, {}};
  // The groups the peer held when it connected, as the kernel saw them: a group the process
  // dropped (setgroups) is not there, whatever /etc/group says of its uid.
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
      groups.resize(bytes / sizeof(gid_t));
      peer.groups = std::move(groups);
      return peer;
    }
    if (errno != ERANGE) return fail("SO_PEERGROUPS");
    groups.resize(bytes / sizeof(gid_t) + 1);  // the kernel said how many bytes it needs
  }
  return fail("SO_PEERGROUPS");
}

namespace {

bool holds(const PeerCredentials& peer, gid_t gid) {
  return peer.gid == gid ||
         std::find(peer.groups.begin(), peer.groups.end(), gid) != peer.groups.end();
}

std::string gidList(const std::vector<gid_t>& gids) {
  std::string out;
  for (gid_t g : gids) out += (out.empty() ? "" : ", ") + std::to_string(g);
  return out;
}

}  // namespace

std::optional<std::string> checkPeer(const PeerCredentials& peer, std::optional<gid_t> group) {
  if (peer.uid == 0) return std::nullopt;
  if (group && holds(peer, *group)) return std::nullopt;
  if (group) {
    return fmt::format(
        "uid {} (gid {}, groups [{}], pid {}) is neither root nor holds group {} "
        "(listen.admin_group; the process itself must hold it, not only its user in /etc/group)",
        peer.uid, peer.gid, gidList(peer.groups), peer.pid, *group);
  }
  return fmt::format("uid {} (gid {}, pid {}) is not root (no listen.admin_group is configured)",
                     peer.uid, peer.gid, peer.pid);
}

std::optional<std::string> checkTaskPeer(const PeerCredentials& peer, const std::string& task,
                                         const std::vector<gid_t>& allowed) {
  if (peer.uid == 0) return std::nullopt;
  for (gid_t g : allowed) {
    if (holds(peer, g)) return std::nullopt;
  }
  return fmt::format(
      "uid {} (gid {}, groups [{}], pid {}) holds none of task {}'s admin_groups (gids {})",
      peer.uid, peer.gid, gidList(peer.groups), peer.pid, task, gidList(allowed));
}

namespace {

Result<NetnsId> netnsOfNsfd(int nsfd) {
  struct stat st {};
  int rc = ::fstat(nsfd, &st);
  int err = errno;
  ::close(nsfd);
  if (rc != 0) {
    return Diagnostic{"", 0, 0, "", fmt::format("fstat of a netns: {}", std::strerror(err))};
  }
  return NetnsId{st.st_dev, st.st_ino};
}

}  // namespace

Result<NetnsId> socketNetns(int fd) {
  int nsfd = ::ioctl(fd, SIOCGSKNS);
  if (nsfd < 0) {
    return Diagnostic{"", 0, 0, "",
                      fmt::format("ioctl(SIOCGSKNS): {} (errno {})", std::strerror(errno), errno)};
  }
  return netnsOfNsfd(nsfd);
}

Result<NetnsId> ownNetns() {
  // /proc needs no capability; SIOCGSKNS on a socket of our own is the fallback without it.
  if (int nsfd = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC); nsfd >= 0) {
    return netnsOfNsfd(nsfd);
  }
  int s = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    return Diagnostic{"", 0, 0, "", fmt::format("socket: {}", std::strerror(errno))};
  }
  auto ns = socketNetns(s);
  ::close(s);
  return ns;
}

std::optional<FdRefusal> checkSandboxNetns(const std::vector<int>& fds, const NetnsId& serve,
                                           std::optional<NetnsId>& first) {
  std::optional<NetnsId> seen = first;
  for (int fd : fds) {
    auto ns = socketNetns(fd);
    if (!ns) {
      return FdRefusal{admin_reason::kNetnsUnknown,
                       fmt::format("cannot tell which network namespace a socket lives in ({}); "
                                   "serve needs CAP_NET_ADMIN over the sandbox's namespace "
                                   "(run serve as root)",
                                   ns.errors().front().message)};
    }
    if (*ns == serve) {
      return FdRefusal{admin_reason::kServeNetns,
                       "a socket in serve's own network namespace: a sandbox hands over sockets "
                       "of its own namespace, and serving this one would open the task's proxy "
                       "on serve's network"};
    }
    if (seen && *ns != *seen) {
      return FdRefusal{admin_reason::kMixedNetns,
                       "sockets from more than one network namespace on one connection (one "
                       "run hands over the sockets of its one sandbox)"};
    }
    seen = *ns;
  }
  first = seen;
  return std::nullopt;
}

namespace {

// The bound address of an IPv4/IPv6 socket, or nullopt.
std::optional<sockaddr_storage> boundAddress(int fd) {
  sockaddr_storage addr{};
  socklen_t addrLen = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addrLen) != 0 ||
      (addr.ss_family != AF_INET && addr.ss_family != AF_INET6)) {
    return std::nullopt;
  }
  return addr;
}

uint16_t portOf(const sockaddr_storage& a) {
  return ntohs(a.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in&>(a).sin_port
                                      : reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
}

}  // namespace

std::optional<FdRefusal> checkLoopback(int fd, std::string_view what) {
  auto addr = boundAddress(fd);
  if (!addr) return FdRefusal{admin_reason::kNotAListener, "socket is not IPv4 or IPv6"};
  char text[INET6_ADDRSTRLEN] = "?";
  bool loopback;
  if (addr->ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(*addr).sin_addr;
    loopback = (ntohl(a.s_addr) >> 24) == 127;
    ::inet_ntop(AF_INET, &a, text, sizeof(text));
  } else {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(*addr).sin6_addr;
    loopback = IN6_IS_ADDR_LOOPBACK(&a);
    ::inet_ntop(AF_INET6, &a, text, sizeof(text));
  }
  if (loopback) return std::nullopt;
  return FdRefusal{admin_reason::kNotLoopback,
                   fmt::format("{} is bound to {}, not to loopback (127.0.0.0/8 or ::1): a "
                               "sandbox's listeners are on loopback, and one on any other "
                               "address would serve the task to a network",
                               what, text)};
}

std::optional<std::string> checkListenerFd(int fd) {
  int type = 0, listening = 0;
  socklen_t len = sizeof(type);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    return fmt::format("descriptor is not a socket ({})", std::strerror(errno));
  }
  if (type != SOCK_STREAM) return fmt::format("socket type {} is not SOCK_STREAM", type);
  len = sizeof(listening);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) {
    return std::string("socket is not listening");
  }
  if (!boundAddress(fd)) return std::string("socket is not IPv4 or IPv6");
  return std::nullopt;
}

std::optional<std::string> checkDatagramFd(int fd) {
  int type = 0;
  socklen_t len = sizeof(type);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    return fmt::format("descriptor is not a socket ({})", std::strerror(errno));
  }
  if (type != SOCK_DGRAM) return fmt::format("socket type {} is not SOCK_DGRAM", type);
  auto addr = boundAddress(fd);
  if (!addr) return std::string("socket is not IPv4 or IPv6");
  if (portOf(*addr) == 0) return std::string("socket is not bound");
  return std::nullopt;
}

std::optional<std::string> checkCaptureFds(const std::vector<int>& fds,
                                           const std::vector<uint16_t>& ports) {
  if (fds.size() < 3 || fds.size() > 2 + 2 * ports.size()) {
    return fmt::format(
        "{} descriptors attached; expected the DNS UDP and TCP sockets and 1 to {} listeners",
        fds.size(), 2 * ports.size());
  }
  if (auto bad = checkDatagramFd(fds[0])) return "the DNS UDP socket: " + *bad;
  if (auto bad = checkListenerFd(fds[1])) return "the DNS TCP socket: " + *bad;
  for (size_t i = 2; i < fds.size(); ++i) {
    if (auto bad = checkListenerFd(fds[i])) return "a capture listener: " + *bad;
    uint16_t port = portOf(*boundAddress(fds[i]));  // checkListenerFd saw IPv4 or IPv6
    if (std::find(ports.begin(), ports.end(), port) == ports.end()) {
      return fmt::format("a capture listener is on port {}, which is not a capture port", port);
    }
  }
  return std::nullopt;
}

}  // namespace sandgate::proxy
