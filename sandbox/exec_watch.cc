// Watching the sandbox's execs with a seccomp user notification (see exec_watch.h).
#include "sandbox/exec_watch.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

// Reads a NUL-terminated string of at most `limit` bytes at `addr` in `pid`'s memory.
bool readString(pid_t pid, uint64_t addr, size_t limit, std::string* out, bool* cut) {
  out->clear();
  char buf[256];
  while (out->size() < limit) {
    iovec local{buf, sizeof buf};
    iovec remote{reinterpret_cast<void*>(addr + out->size()), sizeof buf};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) {
      // A string that ends near the end of a mapping: one byte at a time.
      remote.iov_len = local.iov_len = 1;
      n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
      if (n <= 0) return !out->empty();
    }
    const char* nul = static_cast<const char*>(memchr(buf, '\0', static_cast<size_t>(n)));
    out->append(buf, nul ? static_cast<size_t>(nul - buf) : static_cast<size_t>(n));
    if (nul != nullptr) break;
  }
  if (out->size() >= limit) {
    out->resize(limit);
    *cut = true;
  }
  return true;
}

// The last NSpid / PPid as the sandbox sees them, from the host's /proc.
void sandboxPids(pid_t hostPid, ExecEvent* e) {
  std::ifstream status("/proc/" + std::to_string(hostPid) + "/status");
  std::string line;
  pid_t hostPpid = 0;
  while (std::getline(status, line)) {
    std::istringstream fields(line.substr(line.find(':') + 1));
    if (line.rfind("NSpid:", 0) == 0) {
      for (pid_t p; fields >> p;) e->pid = p;
    } else if (line.rfind("PPid:", 0) == 0) {
      fields >> hostPpid;
    }
  }
  if (hostPpid == 0) return;
  std::ifstream parent("/proc/" + std::to_string(hostPpid) + "/status");
  while (std::getline(parent, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    for (pid_t p; fields >> p;) e->ppid = p;
  }
}

// The target of descriptor `fd` of host process `pid` ("" when it cannot be read).
std::string descriptorTarget(pid_t pid, int64_t fd) {
  if (fd < 0 || fd > INT_MAX) return {};
  char buf[PATH_MAX];
  std::string link = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// The descriptor number in /proc/self/fd/N, /proc/thread-self/fd/N or /dev/fd/N, or -1.
int64_t descriptorPath(const std::string& path) {
  for (const char* prefix : {"/proc/self/fd/", "/proc/thread-self/fd/", "/dev/fd/"}) {
    const std::string p = prefix;
    if (path.rfind(p, 0) != 0 || path.size() == p.size() || path.size() - p.size() > 9) continue;
    const std::string digits = path.substr(p.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    return std::stoll(digits);
  }
  return -1;
}

// Fills event->target and memfd (see ExecEvent): the path alone may name nothing (fexecve).
void resolveTarget(const seccomp_notif& req, ExecEvent* e) {
  if (e->execveat && (e->path.empty() || e->path[0] != '/')) {
    // The descriptor is an int: its low 32 bits.
    const auto dirfd = static_cast<int32_t>(req.data.args[0]);
    if (dirfd == AT_FDCWD) return;  // a path relative to the cwd: as an execve's
    std::string dir = descriptorTarget(e->hostPid, dirfd);
    if (dir.empty()) return;
    e->target = e->path.empty() ? dir : dir + "/" + e->path;
  } else if (int64_t fd = descriptorPath(e->path); fd >= 0) {
    e->target = descriptorTarget(e->hostPid, fd);
  }
  e->memfd = e->target.rfind("/memfd:", 0) == 0;
}

}  // namespace

int loadExecNotifyFilter() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) throw SetupError("sandbox: exec watch: seccomp_init failed");
  int rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(execve), 0);
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_NOTIFY, SCMP_SYS(execveat), 0);
  if (rc == 0) rc = seccomp_load(ctx);
  int fd = rc == 0 ? seccomp_notify_fd(ctx) : -1;
  seccomp_release(ctx);
  if (rc != 0) throwSys("watch the sandbox's execs", "seccomp_load", -rc);
  if (fd < 0) throwSys("watch the sandbox's execs", "seccomp_notify_fd", -fd);
  return fd;
}

bool takeExecNotification(int notifyFd, ExecEvent* event) {
  seccomp_notif* req = nullptr;
  seccomp_notif_resp* resp = nullptr;
  if (seccomp_notify_alloc(&req, &resp) != 0) return false;
  bool ok = seccomp_notify_receive(notifyFd, req) == 0;
  if (ok) {
    *event = ExecEvent{};
    event->time = std::chrono::duration<double>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    event->hostPid = static_cast<pid_t>(req->pid);
    event->execveat = req->data.nr == seccomp_syscall_resolve_name("execveat");
    uint64_t pathAddr = event->execveat ? req->data.args[1] : req->data.args[0];
    uint64_t argvAddr = event->execveat ? req->data.args[2] : req->data.args[1];
    bool cut = false;
    event->readable = readString(event->hostPid, pathAddr, 4096, &event->path, &cut);
    for (size_t i = 0; argvAddr != 0 && i <= kMaxExecArgs; ++i) {
      uint64_t p = 0;
      iovec local{&p, sizeof p};
      iovec remote{reinterpret_cast<void*>(argvAddr + i * sizeof p), sizeof p};
      if (process_vm_readv(event->hostPid, &local, 1, &remote, 1, 0) != sizeof p || p == 0) break;
      if (i == kMaxExecArgs) {
        event->argvCut = true;
        break;
      }
      std::string arg;
      readString(event->hostPid, p, kMaxExecArgBytes, &arg, &event->argvCut);
      event->argv.push_back(std::move(arg));
    }
    if (event->readable) resolveTarget(*req, event);
    sandboxPids(event->hostPid, event);
    // Recorded, never decided: the call goes on as if no filter were there.
    resp->id = req->id;
    resp->val = 0;
    resp->error = 0;
    resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    (void)seccomp_notify_respond(notifyFd, resp);
  }
  seccomp_notify_free(req, resp);
  return ok;
}

}  // namespace sandgate::sandbox
