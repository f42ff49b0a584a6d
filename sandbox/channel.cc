// Typed datagrams with optional SCM_RIGHTS over the launcher's control socketpair.
#include "sandbox/channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sandgate::sandbox {
namespace {

struct Header {
  uint32_t type;
  int32_t value;
};

constexpr size_t kMaxText = 8192;
constexpr size_t kMaxFds = 32;  // 2 proxy, or 2 DNS + 2 per capture port

}  // namespace

bool sendMessage(int fd, MsgType type, int32_t value, const std::string& text,
                 const std::vector<int>& fds) {
  if (fds.size() > kMaxFds) {
    errno = EINVAL;
    return false;
  }
  Header h{static_cast<uint32_t>(type), value};
  std::string payload = text.substr(0, kMaxText);
  iovec iov[2] = {{&h, sizeof h}, {payload.data(), payload.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = payload.empty() ? 1 : 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    if (sendmsg(fd, &msg, MSG_NOSIGNAL) >= 0) return true;
    if (errno != EINTR) return false;
  }
}

RecvStatus receiveMessage(int fd, int timeoutMs, Message* out) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    int n = poll(&p, 1, timeoutMs);
    if (n > 0) break;
    if (n == 0) return RecvStatus::kTimeout;
    if (errno != EINTR) return RecvStatus::kError;
  }
  Header h{};
  std::string text(kMaxText, '\0');
  iovec iov[2] = {{&h, sizeof h}, {text.data(), text.size()}};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return RecvStatus::kError;
  if (n == 0) return RecvStatus::kEof;
  out->fds.clear();
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const auto* data = reinterpret_cast<const int*>(CMSG_DATA(c));
      for (size_t i = 0; i < count; ++i) out->fds.push_back(data[i]);
    }
  }
  if (static_cast<size_t>(n) < sizeof h) {
    for (int f : out->fds) close(f);
    errno = EPROTO;
    return RecvStatus::kError;
  }
  out->type = static_cast<MsgType>(h.type);
  out->value = h.value;
  out->text.assign(text.data(), static_cast<size_t>(n) - sizeof h);
  return RecvStatus::kMessage;
}

}  // namespace sandgate::sandbox
