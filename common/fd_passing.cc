// SCM_RIGHTS messages (see fd_passing.h).
#include "common/fd_passing.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace sandgate::fd_passing {

namespace {

// Sized and aligned for kMaxFds descriptors.
struct ControlBuffer {
  alignas(cmsghdr) char bytes[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
};

}  // namespace

ssize_t sendWithFds(int sock, std::span<iovec> iov, std::span<const int> fds) {
  if (fds.size() > kMaxFds) {
    errno = EINVAL;
    return -1;
  }
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size();
  ControlBuffer control;
  if (!fds.empty()) {
    msg.msg_control = control.bytes;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

ssize_t receiveWithFds(int sock, std::span<iovec> iov, std::vector<int>* fds, int flags,
                       int* msgFlags) {
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size();
  ControlBuffer control;
  msg.msg_control = control.bytes;
  msg.msg_controllen = sizeof control.bytes;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return n;  // nothing was received, so no descriptor either
  if (msgFlags) *msgFlags = msg.msg_flags;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds->push_back(fd);
    }
  }
  return n;
}

}  // namespace sandgate::fd_passing
