// The sandbox's PID 1 and the exec of the command.
#include "sandbox/init.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "common/terminal_text.h"
#include "sandbox/bind_filter.h"
#include "sandbox/capture_net.h"
#include "sandbox/channel.h"
#include "sandbox/exec_watch.h"
#include "sandbox/launcher.h"
#include "sandbox/layer_copy.h"
#include "sandbox/network.h"
#include "sandbox/privileges.h"
#include "sandbox/seccomp_filter.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

constexpr int kHandled[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD};

void noop(int) {}

// PID 1 is a copy of the launcher: wipe the launcher's argument and environment strings from
// its memory so that /proc/1/cmdline (readable by every process) and /proc/1/environ show
// nothing of them. Non-dumpability already keeps /proc/1/environ and /proc/1/mem closed.
void scrubArgsAndEnvironment() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  if (close == std::string::npos) return;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  unsigned long v[52] = {};
  for (int i = 3; i <= 51 && fields >> f; ++i) v[i] = std::strtoul(f.c_str(), nullptr, 10);
  unsigned long argStart = v[48], argEnd = v[49], envStart = v[50], envEnd = v[51];
  if (envStart != 0 && envEnd > envStart) {
    std::memset(reinterpret_cast<void*>(envStart), 0, envEnd - envStart);
  }
  if (argStart != 0 && argEnd > argStart) {
    std::memset(reinterpret_cast<void*>(argStart), 0, argEnd - argStart);
    const char name[] = "sandgate-init";
    prctl(PR_SET_NAME, name, 0, 0, 0);  // comm, as ps shows it
    if (argEnd - argStart > sizeof name)
      std::memcpy(reinterpret_cast<void*>(argStart), name, sizeof name);
  }
}

std::string lookUp(const std::string& file, const std::vector<std::string>& env, int* err) {
  *err = ENOENT;
  if (file.find('/') != std::string::npos) {
    *err = 0;
    return file;
  }
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& e : env) {
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  }
  std::istringstream dirs(path);
  std::string dir;
  for (int i = 0; i < 1024 && std::getline(dirs, dir, ':'); ++i) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + file;
    struct stat st {};
    if (stat(candidate.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (access(candidate.c_str(), X_OK) == 0) {
      *err = 0;
      return candidate;
    }
    *err = EACCES;
  }
  return {};
}

[[noreturn]] void runCommand(const ChildSpec& spec) {
  const int ch = spec.channel;
  try {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);  // EINVAL for some
    sigset_t none;
    sigemptyset(&none);
    checkSys(sigprocmask(SIG_SETMASK, &none, nullptr), "reset signal mask", "sigprocmask");
    closeOtherDescriptors({ch});
    checkSys(chdir(spec.fs.workspace.c_str()), "enter workspace " + spec.fs.workspace, "chdir");
    applyResourceLimits(spec.maxOpenFiles);
    int err = 0;
    std::string exe = lookUp(spec.argv[0], spec.env, &err);
    std::vector<char*> argv, envp;
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    dropPrivileges();
    if (spec.watchExecs) {
      // Before the confinement filter (which refuses seccomp(2) itself); the launcher holds
      // the descriptor before this process's own exec waits for it.
      int notify = loadExecNotifyFilter();
      if (!sendMessage(ch, MsgType::kExecWatch, 0, {}, {notify})) {
        throwSys("hand the exec watch to the launcher", "sendmsg");
      }
      close(notify);
    }
    if (spec.bindWorkspace) loadBindWorkspaceFilter();  // bind_filter.h: no setuid on the host
    loadSeccompFilter();
    if (err == 0) {
      execve(exe.c_str(), argv.data(), envp.data());
      err = errno;
    }
    int code = err == ENOENT ? kExitNotFound : kExitCannotExecute;
    sendMessage(ch, MsgType::kExecError, code, sysFailure("exec " + spec.argv[0], "execve", err));
    _exit(code);
  } catch (const std::exception& e) {
    sendMessage(ch, MsgType::kSetupError, 0, e.what());
  }
  _exit(kExitSetupFailed);
}

// The report's line when the copy out of the sized layer stopped at --disk: what was left out.
std::string diskCutLine(const LayerCopyOutcome& c, uint64_t limit) {
  std::string line = "disk_limit: the copy of the run's changes stopped at the --disk size (" +
                     std::to_string(limit) + " bytes): " + std::to_string(c.notCopiedCount) +
                     " files (" + std::to_string(c.notCopiedBytes) +
                     " bytes) were not copied and are not in the change list:";
  for (const auto& n : c.notCopied) line += " " + quoteName(n);
  if (c.notCopiedCount > c.notCopied.size()) {
    line += " and " + std::to_string(c.notCopiedCount - c.notCopied.size()) + " more";
  }
  return line;
}

}  // namespace

void runInit(const ChildSpec& spec) {
  const int ch = spec.channel;
  try {
    // The outer child is our parent: if it dies (it dies with the launcher), so does the
    // sandbox — SIGKILL from an ancestor namespace reaches even a PID 1.
    checkSys(prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "die with the launcher", "prctl");
    // The sandbox's own session and process group, apart from the outer child's and the
    // launcher's: what the workload sends to its group (kill(0, …)) stays in the sandbox, where
    // PID 1 ignores what it has no handler for. No controlling terminal: stdio still works, the
    // terminal's signals go to the launcher, which passes them on to us.
    checkSys(setsid(), "start the sandbox's session", "setsid");
    // Blocked from here on, taken with sigwaitinfo below: a signal the launcher passes on while
    // the sandbox is still being set up waits instead of being dropped (a PID 1 drops signals it
    // has no handler for).
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kHandled) sigaddset(&set, sig);
    checkSys(sigprocmask(SIG_BLOCK, &set, nullptr), "block signals", "sigprocmask");
    checkSys(sethostname(spec.hostname.data(), spec.hostname.size()), "set hostname",
             "sethostname");
    std::vector<std::string> warnings;
    DiskLayer disk;
    buildFilesystem(spec.fs, &warnings, &disk);
    scrubArgsAndEnvironment();
    std::vector<int> listeners = setUpNetwork(spec.proxyPort, &warnings);
    CaptureSockets capture;
    if (spec.transparent) capture = setUpCapture(spec.capture, &warnings);
    for (const auto& w : warnings) sendMessage(ch, MsgType::kWarning, 0, w);
    if (spec.transparent) {
      std::vector<int> fds = {capture.dnsUdp, capture.dnsTcp};
      fds.insert(fds.end(), capture.listeners.begin(), capture.listeners.end());
      if (!sendMessage(ch, MsgType::kCapture, capture.ipv6 ? 1 : 0, {}, fds)) {
        throwSys("hand the DNS and capture sockets to the launcher", "sendmsg");
      }
      for (int fd : fds) close(fd);  // the proxy holds them now
    }
    if (!sendMessage(ch, MsgType::kListeners, 0, {}, listeners)) {
      throwSys("hand the listeners to the launcher", "sendmsg");
    }
    for (int fd : listeners) close(fd);  // the proxy holds them now; nothing here may accept
    waitForGo(ch);

    // PID 1 only gets the signals it has a handler for: no-op handlers, the signals stay blocked
    // and are taken synchronously.
    struct sigaction sa {};
    sa.sa_handler = noop;
    for (int sig : kHandled) {
      checkSys(sigaction(sig, &sa, nullptr), "install signal handlers", "sigaction");
    }
    pid_t command = checkSys(fork(), "start the command", "fork");
    if (command == 0) runCommand(spec);
    dropPrivileges();  // PID 1 needs none to wait and to signal its own uid's processes
    // PID 1 runs as the workload's uid in the workload's namespaces: a process of the sandbox
    // that took it over (it shares the uid) would otherwise hold every call the command is
    // refused. From here on it only waits, signals, copies the upper layer and writes to the
    // channel, none of which the filter refuses.
    loadSeccompFilter();

    for (;;) {
      siginfo_t si{};
      int sig = sigwaitinfo(&set, &si);
      if (sig < 0) {
        if (errno == EINTR) continue;
        throwSys("wait for signals", "sigwaitinfo");
      }
      if (sig == SIGCHLD) {
        int status = 0;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
          if (p == command) {
            if (disk.upper >= 0) {
              // Nothing may write the sized upper layer while it is copied: every other
              // process goes first (PID 1 survives kill(-1)), then the copy, as the run's uid.
              kill(-1, SIGKILL);
              while (waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
              }
              // Holes stay holes and links links, and the copy stops at the --disk size:
              // the host's disk gets no more than the sized layer held.
              LayerCopyOptions bound;
              bound.maxBytes = disk.maxBytes;
              LayerCopyOutcome copied;
              if (auto e = copyUpperLayer(disk.upper, disk.target, bound, &copied); !e.empty()) {
                sendMessage(ch, MsgType::kWarning, 0, "the run's changes are incomplete: " + e);
              }
              if (copied.notCopiedCount > 0) {
                sendMessage(ch, MsgType::kWarning, 0, diskCutLine(copied, disk.maxBytes));
              }
            }
            sendMessage(ch, MsgType::kCommandExit, status);
            _exit(0);  // the kernel kills every other process of the namespace
          }
        }
      } else if (sig == SIGTERM || sig == SIGHUP || sig == SIGINT || sig == SIGQUIT) {
        // Every process of the sandbox (never PID 1 itself): for ^C and ^\ (passed on by the
        // launcher, the sandbox has no terminal) that is what a terminal does to a foreground
        // job without job control, so that `sh -c 'make; …'` and make both see it.
        kill(-1, sig);
        // A stopped process (the workload may stop itself) would hold a TERM until the
        // launcher's SIGKILL: continue it so that it ends now, as supervisors do.
        if (sig == SIGTERM) kill(-1, SIGCONT);
      } else if (sig == SIGUSR1 || sig == SIGUSR2) {
        kill(command, sig);
      }
    }
  } catch (const std::exception& e) {
    sendMessage(ch, MsgType::kSetupError, 0, e.what());
  }
  _exit(kExitSetupFailed);
}

}  // namespace sandgate::sandbox
