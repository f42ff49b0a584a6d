// Descriptors passed over a Unix socket (SCM_RIGHTS): the launcher's control socketpair
// (sandbox/channel.h), the admin socket's client and server (proxy/admin/). One place that
// builds and reads the control message.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <span>
#include <vector>

namespace sandgate::fd_passing {

// The most descriptors one message carries (the control buffer's size).
inline constexpr size_t kMaxFds = 64;

// sendmsg(2) of `iov` with `fds` attached (none: no control message), MSG_NOSIGNAL, retried
// on EINTR. Returns the bytes sent, or -1 with errno (EINVAL for more than kMaxFds).
ssize_t sendWithFds(int sock, std::span<iovec> iov, std::span<const int> fds);

// recvmsg(2) into `iov` with `flags` (MSG_CMSG_CLOEXEC is always added), retried on EINTR.
// The descriptors that came with the message are appended to *fds, close-on-exec: the caller
// owns them, also when it then rejects the message. Returns the bytes read, 0 at end of file,
// or -1 with errno (no descriptor is left open then). `msgFlags`, when set, gets the message's
// flags (MSG_TRUNC: the data did not fit `iov`; MSG_CTRUNC: more than kMaxFds descriptors came,
// and the kernel closed the rest).
ssize_t receiveWithFds(int sock, std::span<iovec> iov, std::vector<int>* fds, int flags = 0,
                       int* msgFlags = nullptr);

}  // namespace sandgate::fd_passing
