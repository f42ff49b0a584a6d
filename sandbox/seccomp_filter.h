// The seccomp filter loaded just before exec: refuses what a confined build never needs and what
// would let it undo the confinement, leave the proxy's network or widen the kernel attack surface.
//
// Why a denylist (default allow) and not an allowlist like container runtimes' default profiles:
// the command already runs without any capability (in every user namespace) and with
// no_new_privs, so the privileged calls an allowlist mostly exists to stop (mounts, modules,
// raw I/O, clock and host settings) fail in the kernel's own capability checks; what an
// unprivileged process can still reach is listed here by class (namespaces, other processes,
// io_uring, bpf, keyrings, userfaultfd, perf, socket families, LDT, terminal injection). The
// workload is arbitrary toolchains (compilers, language runtimes, test suites) whose libcs adopt
// new system calls release by release (clone3, close_range, faccessat2, epoll_pwait2, futex_waitv,
// cachestat, …): an allowlist refuses each one until someone adds it, with failures that look
// like bugs in the tool. The cost of default allow: a system call added to a future kernel is
// allowed until it is listed here; review this list against new kernels' syscall tables.
#pragma once

#include <string>
#include <vector>

namespace sandgate::sandbox {

// System calls refused outright with EPERM (names as libseccomp knows them). In addition:
// clone/unshare with any CLONE_NEW* flag → EPERM; clone3 → ENOSYS (its flags sit in memory a
// filter cannot read; libc falls back to clone); socket(2)/socketpair(2) of any family but
// AF_UNIX, AF_INET and AF_INET6 → EAFNOSUPPORT (vsock, netlink, packet, alg, tipc, rds, kcm,
// bluetooth, can, …); socket(AF_UNIX/AF_INET/AF_INET6, SOCK_RAW, …) → EPERM; ioctl(TIOCSTI/
// TIOCLINUX) → EPERM (no typing into the launcher's terminal). Other architectures (i386, x32)
// are killed: their syscall numbers and socketcall(2) multiplexing would bypass the argument
// filters.
const std::vector<std::string>& refusedSyscalls();

// Loads the filter into the calling thread (no_new_privs must already be set). Throws SetupError.
void loadSeccompFilter();

}  // namespace sandgate::sandbox
