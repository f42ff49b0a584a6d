// The launcher's side of a running sandbox (see supervisor.h).
#include "sandbox/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "common/terminal_text.h"
#include "sandbox/cgroup.h"
#include "sandbox/channel.h"
#include "sandbox/exec_watch.h"
#include "sandbox/identity.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

using Clock = std::chrono::steady_clock;

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

// The signals a user sends `sandgate run` (^C, ^\, a hang-up, kill, a supervisor stopping it).
// The sandbox is in a session of its own, so no terminal signal reaches it directly: the launcher
// takes these (blocked, read from a signalfd) and passes them to the sandbox's PID 1, which
// passes them to the command; the run still ends with the command's status. A signal ignored
// when the launcher started (nohup, `&` in a script) stays ignored. Blocked before the proxy's
// threads start, so they inherit the mask and none of them takes the signal instead.
//
// SIGTTOU is blocked too (never read): the sandbox shares the terminal and may set TOSTOP on it,
// which would otherwise stop a background launcher at its next log line — before its timeout
// fires.
class ForwardedSignals {
 public:
  ForwardedSignals() {
    sigset_t ttou;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    sigset_t block = ttou;
    sigemptyset(&forwarded_);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
      struct sigaction old {};
      if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      sigaddset(&forwarded_, sig);
      sigaddset(&block, sig);
    }
    pthread_sigmask(SIG_BLOCK, &block, &saved_);
    fd_ = signalfd(-1, &forwarded_, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd_ < 0) {  // not forwarded, not blocked: they end the launcher, and the sandbox with it
      spdlog::warn("{}", sysFailure("forward signals to the sandbox", "signalfd", errno));
      pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
      pthread_sigmask(SIG_BLOCK, &ttou, nullptr);
    }
  }
  // Signals still pending belong to this run, which is over: dropped, not acted on later.
  ~ForwardedSignals() {
    while (next() != 0) {
    }
    if (fd_ >= 0) close(fd_);
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  ForwardedSignals(const ForwardedSignals&) = delete;
  ForwardedSignals& operator=(const ForwardedSignals&) = delete;

  int fd() const { return fd_; }
  // The next pending signal, or 0.
  int next() {
    signalfd_siginfo si{};
    if (fd_ < 0 || read(fd_, &si, sizeof si) != static_cast<ssize_t>(sizeof si)) return 0;
    return static_cast<int>(si.ssi_signo);
  }

 private:
  sigset_t forwarded_{};
  sigset_t saved_{};
  int fd_ = -1;
};

// Whether a datagram or an exec notification waits on `fd` now.
bool pending(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

}  // namespace

SupervisedOutcome supervise(int ch, pid_t outer, const Identity& id, Cgroup* cgroup,
                            std::optional<Clock::time_point> deadline,
                            std::chrono::milliseconds grace, const SupervisedCallbacks& cb,
                            RunResult* result) {
  SupervisedOutcome out;
  int execWatch = -1;        // kExecWatch: every exec of the sandbox waits for us on it
  ForwardedSignals signals;  // before onStarted: the proxy's threads inherit the mask
  bool commandStarted = false;
  ProcessHandle outerHandle(outer), init;
  constexpr auto kNever = Clock::time_point::max();
  Clock::time_point killAt = kNever;  // SIGKILL due then (after a SIGTERM)
  std::vector<int> pendingCapture;    // kCapture descriptors, handed over with kListeners
  bool captureIpv6 = false;
  auto abort = [&](std::string why) {
    // Not logged here: it becomes the run's error, which the caller says once.
    if (out.setupError.empty()) out.setupError = std::move(why);
    init.signal(SIGKILL);
    outerHandle.signal(SIGKILL);  // its death kills PID 1 (PR_SET_PDEATHSIG) and the namespace
  };
  auto go = [&] {
    if (!sendMessage(ch, MsgType::kGo)) abort(sysFailure("control channel", "sendmsg", errno));
  };
  // The timeout and its escalation, due or not. Called on every wake-up: a sandbox that keeps
  // an exec notification or a message pending at all times (a few hundred processes exec'ing
  // in a loop) would otherwise keep poll from ever timing out, and the run from ever ending.
  auto enforceDeadline = [&] {
    const auto now = Clock::now();
    if (killAt != kNever && now >= killAt) {
      spdlog::warn("sandbox: still running {} ms after SIGTERM, sending SIGKILL", grace.count());
      init.signal(SIGKILL);  // SIGKILL reaches a PID 1 from an ancestor namespace
      outerHandle.signal(SIGKILL);
      killAt = kNever;
    } else if (!out.timedOut && deadline && now >= *deadline) {
      out.timedOut = true;
      spdlog::warn("sandbox: timeout reached, sending SIGTERM");
      if (init.valid()) {
        init.signal(SIGTERM);  // PID 1 forwards it to every process of the sandbox
      } else {
        outerHandle.signal(SIGKILL);  // still setting up: nothing to be graceful with
      }
      killAt = now + grace;
    }
  };
  if (cb.onStarted) {
    try {
      cb.onStarted();
    } catch (const std::exception& e) {
      abort(std::string("sandbox: starting the proxy failed: ") + e.what());
    }
  }
  if (cgroup != nullptr && out.setupError.empty()) {
    if (auto e = cgroup->addProcess(outer); !e.empty()) abort(e);
  }
  if (out.setupError.empty()) go();
  // Bounded by the sandbox: every wake-up checks the deadline first, then consumes what is
  // ready (at most kExecsPerWakeup notifications, the signals, one message); EOF ends the loop,
  // and with a deadline the timeout escalates to SIGKILL, after which the channel closes.
  for (;;) {
    enforceDeadline();
    int waitMs = -1;
    auto wake = killAt != kNever ? killAt : out.timedOut || !deadline ? kNever : *deadline;
    if (wake != kNever) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - Clock::now());
      waitMs = static_cast<int>(std::clamp<int64_t>(ms.count(), 0, INT_MAX));
    }
    pollfd ready[3] = {{ch, POLLIN, 0}, {signals.fd(), POLLIN, 0}, {execWatch, POLLIN, 0}};
    int n = poll(ready, 3, waitMs);  // a negative fd is skipped
    if (n < 0 && errno != EINTR) {
      abort(sysFailure("control channel", "poll", errno));
      break;
    }
    if (n <= 0) continue;  // the deadline (or EINTR): checked at the top
    if (ready[2].revents != 0) {
      for (int i = 0; i < kExecsPerWakeup && execWatch >= 0; ++i) {
        ExecEvent e;
        if (takeExecNotification(execWatch, &e)) {
          if (cb.onExec) cb.onExec(e);
        } else if ((ready[2].revents & (POLLHUP | POLLERR)) != 0) {
          close(execWatch);  // every watched process is gone
          execWatch = -1;
        }
        if (execWatch < 0 || !pending(execWatch)) break;
      }
    }
    if (ready[1].revents != 0) {
      for (int sig; (sig = signals.next()) != 0;) {
        if (commandStarted) {
          init.signal(sig);
        } else if (out.setupError.empty()) {
          abort(std::string("sandbox: interrupted by SIG") + sigabbrev_np(sig) +
                " before the command started");
        }
      }
    }
    if (ready[0].revents == 0) continue;
    Message m;
    RecvStatus s = receiveMessage(ch, 0, &m);
    if (s == RecvStatus::kTimeout) continue;
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
            if (pendingCapture.size() >= 2 && cb.onCapture) {
              cs.dnsUdp = pendingCapture[0];
              cs.dnsTcp = pendingCapture[1];
              cs.listeners.assign(pendingCapture.begin() + 2, pendingCapture.end());
              cs.ipv6 = captureIpv6;
              pendingCapture.clear();
              cb.onCapture(std::move(cs));
            }
            for (int fd : pendingCapture) close(fd);
            pendingCapture.clear();
          }
          handed = true;
          cb.onListeners(m.fds);
          go();
          commandStarted = out.setupError.empty();  // PID 1 forks it on this go
        } catch (const std::exception& e) {
          if (!handed) {
            for (int fd : m.fds) close(fd);
          }
          abort(std::string("sandbox: proxy hand-off failed: ") + e.what());
        }
        break;
      }
      case MsgType::kExecWatch:
        if (execWatch < 0 && m.fds.size() == 1) {
          execWatch = m.fds[0];
        } else {
          for (int fd : m.fds) close(fd);
        }
        break;
      case MsgType::kWarning:
        spdlog::warn("{}", escapeText(m.text, true));  // the sandbox's words: escaped
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
  if (execWatch >= 0) close(execWatch);
  return out;
}

}  // namespace sandgate::sandbox
