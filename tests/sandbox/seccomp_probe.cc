// Test helper: tries each system call the sandbox's seccomp filter refuses, with arguments that
// are harmless and invalid (so that, unfiltered, the kernel answers EFAULT/EBADF/EINVAL rather
// than EPERM), and prints "name errno" per line (0 = succeeded). --host: leaves out the socket
// families that would load a kernel module on the host.
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string_view>

namespace {

void report(const char* name, long rc) {
  std::printf("%s %d\n", name, rc < 0 ? errno : 0);
  if (rc >= 0 && rc < 1024 && std::string_view(name).starts_with("socket"))
    close(static_cast<int>(rc));
}

void* bad() { return reinterpret_cast<void*>(1); }

}  // namespace

int main(int argc, char** argv) {
  const bool host = argc > 1 && std::string_view(argv[1]) == "--host";
  report("mount", syscall(SYS_mount, bad(), bad(), bad(), 0, nullptr));
  report("umount2", syscall(SYS_umount2, bad(), 0));
  report("pivot_root", syscall(SYS_pivot_root, bad(), bad()));
  report("unshare_newuser", syscall(SYS_unshare, CLONE_NEWUSER | CLONE_NEWNET | 0x80000000u));
  // With CLONE_NEWUSER|CLONE_NEWNS the kernel refuses the combination itself (EINVAL).
  report("clone_newuser", syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWNS | CLONE_FS, 0, 0, 0, 0));
  report("clone_newnet", syscall(SYS_clone, CLONE_NEWNET | CLONE_THREAD, 0, 0, 0, 0));
  report("clone3", syscall(SYS_clone3, bad(), 0));
  report("setns", syscall(SYS_setns, -1, 0));
  // The new mount API: bad descriptors and paths (EBADF/EFAULT/EINVAL unfiltered).
  report("open_tree", syscall(SYS_open_tree, -1, bad(), 0));
  report("move_mount", syscall(SYS_move_mount, -1, bad(), -1, bad(), 0));
  report("fsopen", syscall(SYS_fsopen, bad(), 0));
  report("fsmount", syscall(SYS_fsmount, -1, 0, 0));
  report("fspick", syscall(SYS_fspick, -1, bad(), 0));
  report("mount_setattr", syscall(SYS_mount_setattr, -1, bad(), 0, bad(), 0));
  // 6.15, newer than the libseccomp the launcher is built with: refused by number (ENOSYS on
  // an older kernel, unfiltered; EFAULT or EBADF on a newer one).
  report("open_tree_attr", syscall(467, -1, bad(), 0, bad(), 0));
  report("ptrace", syscall(SYS_ptrace, 0x7fffffff, -1, nullptr, nullptr));
  report("bpf", syscall(SYS_bpf, -1, bad(), 0));
  report("perf_event_open", syscall(SYS_perf_event_open, bad(), 0, -1, -1, 0));
  report("keyctl", syscall(SYS_keyctl, 0x7fffffff, 0, 0, 0, 0));
  report("add_key", syscall(SYS_add_key, bad(), bad(), nullptr, 0, 0));
  report("request_key", syscall(SYS_request_key, bad(), bad(), nullptr, 0));
  report("kexec_load", syscall(SYS_kexec_load, 0, 0, nullptr, 0xdeadbeefUL));
  report("init_module", syscall(SYS_init_module, bad(), 0, bad()));
  report("finit_module", syscall(SYS_finit_module, -1, bad(), 0));
  report("userfaultfd", syscall(SYS_userfaultfd, ~0));
  report("open_by_handle_at", syscall(SYS_open_by_handle_at, -1, bad(), 0));
  report("io_uring_setup", syscall(SYS_io_uring_setup, 0, bad()));
  report("socket_packet", syscall(SYS_socket, AF_PACKET, SOCK_RAW, 0));
  report("socket_inet_raw", syscall(SYS_socket, AF_INET, SOCK_RAW, 255));
  report("socket_netlink_raw", syscall(SYS_socket, AF_NETLINK, SOCK_RAW, 0));
  report("socket_netlink_dgram", syscall(SYS_socket, AF_NETLINK, SOCK_DGRAM, 0));
  report("socket_unspec", syscall(SYS_socket, AF_UNSPEC, SOCK_STREAM, 0));
  report("socket_xdp", syscall(SYS_socket, AF_XDP, SOCK_RAW, 0));
  // AF_INET in the low 32 bits, which is all the kernel reads: the filter must not let high
  // bits carry a family past it (unfiltered, this is an ordinary TCP socket).
  report("socket_high_bits", syscall(SYS_socket, 0x100000000L | AF_INET, SOCK_STREAM, 0));
  report("socketpair_netlink", syscall(SYS_socketpair, AF_NETLINK, SOCK_RAW, 0, bad()));
  // Families whose socket(2) loads a kernel module: only inside the sandbox (the host control
  // run passes --host), where the filter answers before the kernel looks for one.
  if (!host) {
    report("socket_vsock", syscall(SYS_socket, AF_VSOCK, SOCK_STREAM, 0));
    report("socketpair_vsock", syscall(SYS_socketpair, AF_VSOCK, SOCK_STREAM, 0, bad()));
    report("socket_alg", syscall(SYS_socket, AF_ALG, SOCK_SEQPACKET, 0));
    report("socket_tipc", syscall(SYS_socket, AF_TIPC, SOCK_RDM, 0));
    report("socket_rds", syscall(SYS_socket, AF_RDS, SOCK_SEQPACKET, 0));
    report("socket_kcm", syscall(SYS_socket, AF_KCM, SOCK_DGRAM, 0));
    report("socket_bluetooth", syscall(SYS_socket, AF_BLUETOOTH, SOCK_STREAM, 3));
    report("socket_can", syscall(SYS_socket, AF_CAN, SOCK_RAW, 1));
  }
#ifdef SYS_modify_ldt
  // Reading zero bytes of an empty LDT succeeds unfiltered.
  report("modify_ldt", syscall(SYS_modify_ldt, 0, nullptr, 0));
#endif
  report("ioctl_tiocsti", syscall(SYS_ioctl, -1, TIOCSTI, bad()));
  report("process_vm_readv", syscall(SYS_process_vm_readv, 0, nullptr, 0, nullptr, 0, ~0UL));
  // Controls that must keep working: an ordinary socket and a thread-style clone-free fork.
  report("socket_inet_stream", syscall(SYS_socket, AF_INET, SOCK_STREAM, 0));
  report("socket_unix_stream", syscall(SYS_socket, AF_UNIX, SOCK_STREAM, 0));
  int pair[2] = {-1, -1};
  report("socketpair_unix", socketpair(AF_UNIX, SOCK_STREAM, 0, pair));
  if (pair[0] >= 0) close(pair[0]), close(pair[1]);
  pid_t p = fork();
  if (p == 0) _exit(0);
  int st = 0;
  if (p > 0) waitpid(p, &st, 0);
  report("fork", p);
  return 0;
}
