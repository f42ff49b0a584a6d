// The seccomp filter loaded just before exec: refuses (EPERM) what a confined build never needs
// and what would let it undo the confinement or widen the kernel attack surface.
#pragma once

#include <string>
#include <vector>

namespace sandgate::sandbox {

// System calls refused outright with EPERM (names as libseccomp knows them). In addition:
// clone/unshare with any CLONE_NEW* flag → EPERM; clone3 → ENOSYS (its flags sit in memory a
// filter cannot read; libc falls back to clone); socket(AF_PACKET, …), socket(*, SOCK_RAW, …),
// socket(AF_NETLINK, SOCK_DGRAM, …) → EPERM; ioctl(TIOCSTI/TIOCLINUX) → EPERM (no typing into
// the launcher's terminal). Other architectures (i386, x32) are killed: their syscall numbers
// and socketcall(2) multiplexing would bypass the argument filters.
const std::vector<std::string>& refusedSyscalls();

// Loads the filter into the calling thread (no_new_privs must already be set). Throws SetupError.
void loadSeccompFilter();

}  // namespace sandgate::sandbox
