// sandbox::run(): validates the options, prepares the plan, forks the sandbox and supervises it
// over the control channel (id maps, listener hand-off, timeout, exit status, cleanup).
#include "sandbox/launcher.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <fstream>

#include "sandbox/cgroup.h"
#include "sandbox/channel.h"
#include "sandbox/environment.h"
#include "sandbox/filesystem.h"
#include "sandbox/identity.h"
#include "sandbox/outer_child.h"
#include "sandbox/resolv_conf.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

using Clock = std::chrono::steady_clock;

Diagnostic error(std::string message) { return diagnostic(std::move(message)); }

// Signals a process through a pidfd when the kernel has them (no pid-reuse race), else kill(2).
class ProcessHandle {
 public:
  ProcessHandle() = default;
  explicit ProcessHandle(pid_t pid)
      : pid_(pid), fd_(static_cast<int>(syscall(SYS_pidfd_open, pid, 0))) {}
  ~ProcessHandle() {
    if (fd_ >= 0) close(fd_);
  }
  ProcessHandle(const ProcessHandle&) = delete;
  ProcessHandle& operator=(ProcessHandle&& o) noexcept {
    std::swap(pid_, o.pid_);
    std::swap(fd_, o.fd_);
    return *this;
  }
  bool valid() const { return pid_ > 0; }
  void signal(int sig) const {
    if (fd_ >= 0) {
      syscall(SYS_pidfd_send_signal, fd_, sig, nullptr, 0);
    } else if (pid_ > 0) {
      kill(pid_, sig);
    }
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

struct Outcome {
  std::string setupError;
  std::string execError;
  int execCode = 0;
  std::optional<int> commandStatus;
  std::optional<int> initStatus;
  bool timedOut = false;
};

// Drives the launcher's side of the protocol until every sandbox process has closed the channel.
Outcome supervise(int ch, pid_t outer, const Identity& id, Cgroup* cgroup,
                  std::optional<Clock::time_point> deadline, std::chrono::milliseconds grace,
                  const ListenerCallback& onListeners, const CaptureCallback& onCapture,
                  const StartedCallback& onStarted, RunResult* result) {
  Outcome out;
  ProcessHandle outerHandle(outer), init;
  std::optional<Clock::time_point> killAt;
  std::vector<int> pendingCapture;  // kCapture descriptors, handed over with kListeners
  bool captureIpv6 = false;
  auto abort = [&](std::string why) {
    spdlog::error("{}", why);
    if (out.setupError.empty()) out.setupError = std::move(why);
    init.signal(SIGKILL);
    outerHandle.signal(SIGKILL);  // its death kills PID 1 (PR_SET_PDEATHSIG) and the namespace
  };
  auto go = [&] {
    if (!sendMessage(ch, MsgType::kGo)) abort(sysFailure("control channel", "sendmsg", errno));
  };
  if (onStarted) {
    try {
      onStarted();
    } catch (const std::exception& e) {
      abort(std::string("sandbox: starting the proxy failed: ") + e.what());
    }
  }
  if (cgroup != nullptr && out.setupError.empty()) {
    if (auto e = cgroup->addProcess(outer); !e.empty()) abort(e);
  }
  if (out.setupError.empty()) go();
  // Bounded by the sandbox: every iteration consumes a message, EOF ends the loop, and with a
  // deadline the timeout escalates to SIGKILL, after which the channel closes.
  for (;;) {
    int waitMs = -1;
    auto wake = killAt ? killAt : (out.timedOut ? std::nullopt : deadline);
    if (wake) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*wake - Clock::now());
      waitMs = static_cast<int>(std::clamp<int64_t>(ms.count(), 0, INT_MAX));
    }
    Message m;
    RecvStatus s = receiveMessage(ch, waitMs, &m);
    if (s == RecvStatus::kTimeout) {
      if (!out.timedOut) {
        out.timedOut = true;
        spdlog::warn("sandbox: timeout reached, sending SIGTERM");
        if (init.valid()) {
          init.signal(SIGTERM);  // PID 1 forwards it to every process of the sandbox
        } else {
          outerHandle.signal(SIGKILL);  // still setting up: nothing to be graceful with
        }
        killAt = Clock::now() + grace;
      } else {
        spdlog::warn("sandbox: still running {} ms after SIGTERM, sending SIGKILL", grace.count());
        init.signal(SIGKILL);  // SIGKILL reaches a PID 1 from an ancestor namespace
        outerHandle.signal(SIGKILL);
        killAt.reset();
      }
      continue;
    }
    if (s == RecvStatus::kEof) break;
    if (s == RecvStatus::kError) {
      abort(sysFailure("control channel", "recvmsg", errno));
      break;
    }
    switch (m.type) {
      case MsgType::kUnshared:
        if (auto e = writeIdMaps(outer, id); !e.empty()) {
          abort(e);
        } else {
          go();
        }
        break;
      case MsgType::kInitPid:
        init = ProcessHandle(m.value);
        if (out.timedOut) init.signal(SIGKILL);
        break;
      case MsgType::kCapture:
        for (int fd : pendingCapture) close(fd);  // a second message: keep only the last
        pendingCapture = m.fds;
        captureIpv6 = (m.value & 1) != 0;
        break;
      case MsgType::kListeners: {
        if (!out.setupError.empty() || out.timedOut) {
          for (int fd : m.fds) close(fd);
          break;
        }
        bool handed = false;  // the descriptors of m belong to onListeners once it is called
        try {
          if (!pendingCapture.empty()) {
            CaptureSockets cs;
            if (pendingCapture.size() >= 2 && onCapture) {
              cs.dnsUdp = pendingCapture[0];
              cs.dnsTcp = pendingCapture[1];
              cs.listeners.assign(pendingCapture.begin() + 2, pendingCapture.end());
              cs.ipv6 = captureIpv6;
              pendingCapture.clear();
              onCapture(std::move(cs));
            }
            for (int fd : pendingCapture) close(fd);
            pendingCapture.clear();
          }
          handed = true;
          onListeners(m.fds);
          go();
        } catch (const std::exception& e) {
          if (!handed) {
            for (int fd : m.fds) close(fd);
          }
          abort(std::string("sandbox: proxy hand-off failed: ") + e.what());
        }
        break;
      }
      case MsgType::kWarning:
        spdlog::warn("{}", m.text);
        result->warnings.push_back(m.text);
        break;
      case MsgType::kSetupError:
        if (out.setupError.empty()) out.setupError = m.text;
        break;
      case MsgType::kExecError:
        out.execError = m.text;
        out.execCode = m.value;
        break;
      case MsgType::kCommandExit:
        out.commandStatus = m.value;
        break;
      case MsgType::kInitExit:
        out.initStatus = m.value;
        break;
      default:
        for (int fd : m.fds) close(fd);
        break;
    }
  }
  for (int fd : pendingCapture) close(fd);
  return out;
}

void decodeStatus(int status, const CgroupStats& stats, RunResult* r) {
  if (WIFEXITED(status)) {
    r->exitStatus = WEXITSTATUS(status);
    r->end = RunResult::End::kExited;
  } else if (WIFSIGNALED(status)) {
    r->exitStatus = 128 + WTERMSIG(status);
    r->end = RunResult::End::kSignaled;
  }
  // A memory-cgroup OOM kill is a SIGKILL (137); a shell running the victim exits with 137.
  if (r->exitStatus == 128 + SIGKILL && stats.oomKills > 0) r->end = RunResult::End::kMemoryLimit;
}

}  // namespace

const char* endName(RunResult::End end) {
  switch (end) {
    case RunResult::End::kExited:
      return "exited";
    case RunResult::End::kSignaled:
      return "signaled";
    case RunResult::End::kTimeout:
      return "timeout";
    case RunResult::End::kMemoryLimit:
      return "oom";
    case RunResult::End::kSetupFailed:
      return "setup_failed";
  }
  return "unknown";
}

std::optional<int> threadCount() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) {
      try {
        return std::stoi(line.substr(8));
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

Result<RunResult> run(const Options& options, const ListenerCallback& onListeners,
                      const CaptureCallback& onCapture, const StartedCallback& onStarted) {
  const auto start = Clock::now();
  if (options.argv.empty() || options.argv[0].empty()) return error("sandbox: no command given");
  if (options.cpus && !(*options.cpus > 0)) return error("sandbox: cpus must be positive");
  if (options.pids && *options.pids == 0) return error("sandbox: pids must be positive");
  if (options.transparent) {
    const auto& ports = options.capture.ports;
    // 2 DNS sockets + 2 per port must fit one control message (channel.cc's kMaxFds).
    if (ports.empty() || ports.size() > 15) {
      return error("sandbox: transparent mode needs 1 to 15 capture ports");
    }
    for (size_t i = 0; i < ports.size(); ++i) {
      if (ports[i] == 0 || ports[i] == 53 || ports[i] == options.proxyPort ||
          std::count(ports.begin(), ports.end(), ports[i]) > 1) {
        return error("sandbox: capture port " + std::to_string(ports[i]) +
                     " is 0, 53 (the DNS stub), repeated, or the proxy port");
      }
    }
  }
  if (options.home.empty() || options.home[0] != '/' ||
      options.home.find("..") != std::string::npos) {
    return error("sandbox: home must be an absolute path: " + options.home);
  }
  std::string ws = options.workspace;
  if (ws.empty()) {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == nullptr) return error(sysFailure("workspace", "getcwd", errno));
    ws = cwd;
  }
  char resolved[PATH_MAX];
  if (realpath(ws.c_str(), resolved) == nullptr) {
    return error(sysFailure("workspace " + ws, "realpath", errno));
  }
  ws = resolved;
  struct stat st {};
  if (stat(ws.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return error("sandbox: workspace " + ws + " is not a directory");
  }
  if (ws == "/") return error("sandbox: the workspace cannot be / (the whole host, writable)");
  for (const char* dir : {"/proc", "/dev", "/sys"}) {
    if (ws == dir || ws.rfind(std::string(dir) + "/", 0) == 0) {
      return error("sandbox: the workspace cannot be under " + std::string(dir) + ": " + ws);
    }
  }
  auto id = chooseIdentity(options, ws);
  if (!id) return id.errors();

  ChildSpec spec;
  spec.id = *id;
  spec.fs = planFilesystem(options, ws);
  if (options.transparent) planResolvConf(&spec.fs);
  spec.fs.uid = id->uid;
  spec.fs.gid = id->gid;
  spec.argv = options.argv;
  spec.env = buildEnvironment(options);
  spec.hostname = options.hostname;
  spec.proxyPort = options.proxyPort;
  spec.transparent = options.transparent;
  spec.capture = options.capture;
  spec.maxOpenFiles = options.maxOpenFiles;
  spec.stdinFd = options.stdinFd;
  spec.stdoutFd = options.stdoutFd;
  spec.stderrFd = options.stderrFd;
  spec.launcherPid = getpid();

  if (auto threads = threadCount(); threads && *threads > 1) {
    return error("sandbox: refusing to fork the sandbox from a process with " +
                 std::to_string(*threads) +
                 " threads: its child could hang on a lock another thread holds (start threads "
                 "in run()'s StartedCallback)");
  }
  RunResult result;
  result.uid = id->uid;
  result.gid = id->gid;
  static std::atomic<uint64_t> runs{0};
  std::string name = "sandgate-" + std::to_string(getpid()) + "-" + std::to_string(runs++);
  auto cgroup = Cgroup::create({options.memoryBytes, options.cpus, options.pids}, name,
                               &result.unenforced, &result.warnings);
  {
    // Cgroup::create names each entry after its controller ("memory: why"). A default limit
    // (built-in or config, no flag) that this machine cannot enforce is a warning: refusing
    // would make `sandgate run` unusable without cgroup delegation. A requested one refuses.
    auto isDefault = [&](const std::string& u) {
      return (u.rfind("memory:", 0) == 0 && options.memoryIsDefault) ||
             (u.rfind("pids:", 0) == 0 && options.pidsIsDefault) ||
             (u.rfind("cpu:", 0) == 0 && options.cpusIsDefault);
    };
    std::string requested;
    for (const auto& u : result.unenforced) {
      if (!isDefault(u)) requested += (requested.empty() ? "" : "; ") + u;
    }
    if (!requested.empty() && !options.allowUnenforced) {
      return error(
          "sandbox: refusing to start: a requested limit cannot be enforced on this "
          "machine (" +
          requested + "); allowUnenforced runs without it");
    }
    for (const auto& u : result.unenforced) {
      if (!isDefault(u)) continue;
      std::string w = "default limit not enforced on this machine, running without it: " + u;
      spdlog::warn("sandbox: {}", w);
      result.warnings.push_back(std::move(w));
    }
    if (!requested.empty()) {
      spdlog::warn("sandbox: running WITHOUT these limits (allowUnenforced): {}", requested);
    }
    if (options.onLimits) options.onLimits(result.unenforced);
  }

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return error(sysFailure("control channel", "socketpair", errno));
  }
  pid_t outer = fork();
  if (outer < 0) {
    int err = errno;
    close(sv[0]);
    close(sv[1]);
    return error(sysFailure("start the sandbox", "fork", err));
  }
  if (outer == 0) {
    close(sv[0]);
    spec.channel = sv[1];
    runOuterChild(spec);
  }
  close(sv[1]);
  std::optional<Clock::time_point> deadline;
  if (options.timeout) deadline = start + *options.timeout;
  Outcome out = supervise(sv[0], outer, *id, cgroup.get(), deadline, options.killGrace, onListeners,
                          onCapture, onStarted, &result);
  close(sv[0]);
  int outerStatus = 0;
  while (waitpid(outer, &outerStatus, 0) < 0 && errno == EINTR) {
  }
  CgroupStats stats = cgroup ? cgroup->stats() : CgroupStats{};
  cgroup.reset();  // removes the directories: every process of the run is gone

  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.peakMemoryBytes = stats.peakMemoryBytes;
  result.pidsLimitReached = stats.pidsLimitReached;
  if (!out.setupError.empty()) {
    result.exitStatus = kExitSetupFailed;
    result.end = RunResult::End::kSetupFailed;
    result.error = out.setupError;
  } else if (!out.execError.empty()) {
    result.exitStatus = out.execCode;
    result.end = RunResult::End::kSetupFailed;
    result.error = out.execError;
  } else if (out.timedOut) {
    result.exitStatus = kExitTimeout;
    result.end = RunResult::End::kTimeout;
  } else if (out.commandStatus) {
    decodeStatus(*out.commandStatus, stats, &result);
  } else if (out.initStatus) {
    // PID 1 itself was killed (only the OOM killer or a signal from the host can do that).
    decodeStatus(*out.initStatus, stats, &result);
    result.error = "sandbox: the sandbox's PID 1 ended before the command";
  } else {
    result.exitStatus = kExitSetupFailed;
    result.end = RunResult::End::kSetupFailed;
    result.error = "sandbox: the sandbox ended without a report (outer child wait status " +
                   std::to_string(outerStatus) + ")";
  }
  if (result.end == RunResult::End::kSetupFailed) spdlog::error("{}", result.error);
  return result;
}

}  // namespace sandgate::sandbox
