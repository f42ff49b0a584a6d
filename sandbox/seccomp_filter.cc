// Builds and loads the sandbox's seccomp filter with libseccomp.
#include "sandbox/seccomp_filter.h"

#include <linux/sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <string_view>

#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

// System calls newer than the libseccomp the launcher is built with (Debian 12's 2.5.4 knows
// none of these), by number: since 5.1 (424) a new call has one number on every architecture
// but alpha, so a kernel newer than the library still gets them refused.
int newerSyscall(std::string_view name) {
#if defined(__x86_64__) || defined(__aarch64__) || defined(__i386__) || defined(__arm__) || \
    defined(__riscv) || defined(__powerpc64__) || defined(__s390x__)
  if (name == "open_tree_attr") return 467;  // 6.15: open_tree with mount_setattr's attributes
#endif
  (void)name;
  return __NR_SCMP_ERROR;
}

class Filter {
 public:
  Filter() : ctx_(seccomp_init(SCMP_ACT_ALLOW)) {
    if (ctx_ == nullptr) throw SetupError("sandbox: seccomp: seccomp_init failed");
  }
  ~Filter() { seccomp_release(ctx_); }
  scmp_filter_ctx get() const { return ctx_; }

  void add(uint32_t action, const char* name, std::initializer_list<scmp_arg_cmp> args = {}) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) nr = newerSyscall(name);
    if (nr == __NR_SCMP_ERROR) return;  // unknown on this architecture: nothing to refuse
    int rc = seccomp_rule_add_array(ctx_, action, nr, static_cast<unsigned>(args.size()),
                                    args.size() ? args.begin() : nullptr);
    if (rc != 0) throwSys(std::string("seccomp rule for ") + name, "seccomp_rule_add", -rc);
  }

 private:
  scmp_filter_ctx ctx_;
};

constexpr uint64_t kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWCGROUP, CLONE_NEWUTS,
                                        CLONE_NEWIPC, CLONE_NEWUSER,   CLONE_NEWPID,
                                        CLONE_NEWNET, CLONE_NEWTIME};

}  // namespace

const std::vector<std::string>& refusedSyscalls() {
  static const std::vector<std::string> names = {
      // Undo the confinement: new mounts or namespaces, joining another namespace.
      "mount", "umount2", "pivot_root", "setns", "chroot", "open_tree", "move_mount", "fsopen",
      "fsconfig", "fsmount", "fspick", "mount_setattr", "open_tree_attr",
      // Reach into other processes (the sandbox's PID 1 holds a copy of the launcher's memory).
      "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
      // Large kernel attack surface that builds do not need.
      "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
      "io_uring_register", "keyctl", "add_key", "request_key", "open_by_handle_at",
      "name_to_handle_at",
      // Host-wide operations.
      "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
      "swapon", "swapoff", "syslog", "acct", "quotactl", "settimeofday", "clock_settime",
      "clock_adjtime", "adjtimex", "uselib", "personality", "lookup_dcookie", "vhangup",
      "quotactl_fd",
      // Per-process x86 segment descriptors: only 16-bit and Wine-style code needs them, and the
      // LDT code has had a run of privilege-escalation bugs.
      "modify_ldt"};
  return names;
}

void loadSeccompFilter() {
  Filter f;
  // Killing the other ABIs is libseccomp's default bad-arch action; keep it explicit.
  if (int rc = seccomp_attr_set(f.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc != 0) {
    throwSys("seccomp bad-arch action", "seccomp_attr_set", -rc);
  }
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  for (const auto& name : refusedSyscalls()) f.add(eperm, name.c_str());
  for (uint64_t flag : kNamespaceFlags) {
    f.add(eperm, "unshare", {SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)});
    if (flag != CLONE_NEWTIME) {  // CLONE_NEWTIME is 0x80: inside clone()'s exit-signal byte
      f.add(eperm, "clone", {SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)});
    }
  }
  f.add(SCMP_ACT_ERRNO(ENOSYS), "clone3");
  // Socket families: only AF_UNIX, AF_INET and AF_INET6 (the proxy is reached over inet; tools
  // use unix sockets among themselves). Every other family is refused as the kernel refuses one
  // it does not have, EAFNOSUPPORT, so that programs fall back as they do on such a kernel:
  //  - AF_VSOCK is not namespaced: on a VM host it reaches the hypervisor side, past the proxy;
  //  - AF_NETLINK: the sandbox's network is built and needs no changes; glibc's getaddrinfo
  //    (AI_ADDRCONFIG) then assumes both IPv4 and IPv6, which is what the proxy serves; `ip`
  //    and getifaddrs(3) (so Node's os.networkInterfaces()) fail;
  //  - AF_PACKET, AF_ALG, AF_TIPC, AF_RDS, AF_KCM, AF_BLUETOOTH, AF_CAN, AF_XDP, …: raw links,
  //    the kernel's crypto API and protocol modules that an unprivileged socket(2) would load
  //    (a steady source of kernel bugs) and no build needs.
  // The domain is an int but the filter sees the whole register: together the rules refuse every
  // 64-bit value but 1, 2 and 10 (0, each value from 3 to 9, everything above 10), so that high
  // bits the kernel would drop cannot smuggle a family past them.
  const uint32_t noFamily = SCMP_ACT_ERRNO(EAFNOSUPPORT);
  for (const char* call : {"socket", "socketpair"}) {
    f.add(noFamily, call, {SCMP_A0(SCMP_CMP_EQ, AF_UNSPEC)});
    for (uint64_t af = AF_INET + 1; af < AF_INET6; ++af)
      f.add(noFamily, call, {SCMP_A0(SCMP_CMP_EQ, af)});
    f.add(noFamily, call, {SCMP_A0(SCMP_CMP_GT, AF_INET6)});
  }
  static_assert(AF_UNIX == 1 && AF_INET == 2 && AF_INET6 == 10, "the gaps above assume these");
  // Raw sockets in the allowed families (SOCK_RAW is in the type's low bits, next to the flags).
  for (uint64_t af : {AF_UNIX, AF_INET, AF_INET6}) {
    f.add(eperm, "socket", {SCMP_A0(SCMP_CMP_EQ, af), SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW)});
  }
  // ioctl's request is an unsigned int: compare the low 32 bits only.
  f.add(eperm, "ioctl", {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI)});
  f.add(eperm, "ioctl", {SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX)});
  if (int rc = seccomp_load(f.get()); rc != 0) throwSys("load seccomp filter", "seccomp", -rc);
}

}  // namespace sandgate::sandbox
