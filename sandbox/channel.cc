// Typed datagrams with optional SCM_RIGHTS over the launcher's control socketpair.
#include "sandbox/channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <span>

#include "common/fd_passing.h"

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
  return fd_passing::sendWithFds(fd, std::span<iovec>(iov, payload.empty() ? 1 : 2), fds) >= 0;
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
  out->fds.clear();
  ssize_t n = fd_passing::receiveWithFds(fd, iov, &out->fds);
  if (n < 0) return RecvStatus::kError;
  if (n == 0) {
    for (int f : out->fds) close(f);
    out->fds.clear();
    return RecvStatus::kEof;
  }
  if (static_cast<size_t>(n) < sizeof h || out->fds.size() > kMaxFds) {
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
