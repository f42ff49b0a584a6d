// sandbox::run(): validates the options, prepares the plan, forks the sandbox and waits for it
// (supervisor.h drives the control channel, the timeout and the exec notifications meanwhile).
#include "sandbox/launcher.h"

#include <fcntl.h>
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
#include <cstring>
#include <fstream>

#include "common/terminal_text.h"
#include "sandbox/cgroup.h"
#include "sandbox/channel.h"
#include "sandbox/environment.h"
#include "sandbox/exec_watch.h"
#include "sandbox/filesystem.h"
#include "sandbox/identity.h"
#include "sandbox/outer_child.h"
#include "sandbox/paths.h"
#include "sandbox/resolv_conf.h"
#include "sandbox/run_files.h"
#include "sandbox/supervisor.h"
#include "sandbox/sys_error.h"
#include "sandbox/workspace.h"

namespace sandgate::sandbox {
namespace {

using Clock = std::chrono::steady_clock;

Diagnostic error(std::string message) { return diagnostic(std::move(message)); }

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
  for (const auto& p : options.readOnlyPaths) {
    std::string r = p.empty() || p[0] != '/' ? "" : resolvePath(p);
    if (r.empty()) {
      return error("sandbox: read-only path " + p + ": not an absolute path that exists");
    }
    for (const char* dir : {"/run", "/proc", "/dev", "/sys"}) {
      if (r == "/" || isUnder(r, dir)) {
        return error("sandbox: read-only path " + p + " refused: " +
                     (r == "/" ? std::string("the whole host") : "under " + std::string(dir)) +
                     " (host sockets stay connectable through a read-only bind)");
      }
    }
  }
  auto ws = openWorkspace(options.workspace, options.hiddenPaths);
  if (!ws) return ws.errors();
  // Closed when run() returns: the launcher's copies of the workspace, its mount and the lease.
  struct Closer {
    std::vector<int> fds;
    ~Closer() {
      for (int fd : fds) {
        if (fd >= 0) close(fd);
      }
    }
  } closer{{ws->fd}};
  const bool bind = options.workspaceMode == Options::WorkspaceMode::kBind;
  auto lock = lockWorkspace(*ws, bind);  // held until run() returns, the sweep included
  if (!lock) return lock.errors();
  closer.fds.insert(closer.fds.end(), lock->begin(), lock->end());
  auto id = chooseIdentity(options);
  if (!id) return id.errors();
  closer.fds.push_back(id->leaseFd);

  RunResult result;
  ChildSpec spec;
  spec.id = *id;
  spec.fs = planFilesystem(options, ws->path, &result.warnings);
  spec.fs.workspaceDev = ws->st.st_dev;
  spec.fs.workspaceIno = ws->st.st_ino;
  std::string idmapRefused;
  if (!id->rootless) {
    std::string why;
    spec.fs.workspaceFd = idmappedWorkspace(*ws, id->uid, id->gid, &why);
    closer.fds.push_back(spec.fs.workspaceFd);
    if (spec.fs.workspaceFd < 0) idmapRefused = why;
    if (spec.fs.workspaceFd < 0 && options.workspaceMode == Options::WorkspaceMode::kBind) {
      result.warnings.push_back("the workspace cannot be idmapped (" + why +
                                "): it is bound as it is, so the "
                                "sandbox's uid " +
                                std::to_string(id->uid) +
                                " can write only where the workspace's modes let any user write");
    }
  }
  if (options.workspaceMode == Options::WorkspaceMode::kOverlay) {
    if (options.overlayDir.empty())
      return error("sandbox: overlay mode needs an overlay directory");
    auto layers = prepareOverlayLayers(options.overlayDir, *ws, id->uid, id->gid, id->rootless);
    if (!layers) return layers.errors();
    if (id->rootless && ws->st.st_gid != id->gid) {
      // A rootless user namespace maps the launcher's own gid only; overlayfs cannot copy up a
      // file whose group it cannot map, and the write fails with EOVERFLOW ("Value too large
      // for defined data type"), which says nothing of why.
      std::string w =
          "the workspace belongs to group " + std::to_string(ws->st.st_gid) +
          ", not to the launcher's group " + std::to_string(id->gid) +
          ": a rootless run maps only its own group, so its files of another group cannot be "
          "changed in overlay mode (EOVERFLOW, \"Value too large\"); use --workspace-mode "
          "bind, or a workspace of your group, or run as root";
      result.warnings.push_back(std::move(w));  // logged before the command starts
    }
    closer.fds.push_back(layers->fd);
    spec.fs.overlay = true;
    spec.fs.layersFd = layers->fd;
    spec.fs.layers = layers->path;
    spec.fs.layersDev = layers->dev;
    spec.fs.layersIno = layers->ino;
    if (!idmapRefused.empty()) {
      // Without the idmapped lower layer the run could copy up none of the root-owned files.
      const std::string why = "the workspace cannot be idmapped (" + idmapRefused + ")";
      if (options.diskBytes || !options.earlierLayer.empty()) {
        return error("sandbox: " + why + ", so the run would work on a copy of it, where " +
                     (options.diskBytes ? "--disk (sandbox.disk) bounds nothing: the copy is on "
                                          "the host's disk; run without it"
                                        : "--from and --resume have no layers to start from") +
                     ", or with --workspace-mode bind");
      }
      auto copy = copyWorkspace(*ws, options.overlayDir, id->uid, id->gid, why);
      if (!copy) return copy.errors();
      closer.fds.push_back(copy->fd);
      spec.fs.overlay = false;
      spec.fs.layersFd = -1;  // closed by `closer`; the copy is the workspace now
      spec.fs.workspaceFd = copy->fd;
      result.workspaceCopy = copy->why;
      result.warnings.push_back(copy->why);
    } else if (!options.earlierLayer.empty()) {
      // Checked like a workspace (no link followed); its owner is the earlier run's uid.
      auto earlier = openWorkspace(options.earlierLayer, {});
      if (!earlier) return earlier.errors();
      closer.fds.push_back(earlier->fd);
      spec.fs.earlier = earlier->path;
      spec.fs.earlierDev = earlier->st.st_dev;
      spec.fs.earlierIno = earlier->st.st_ino;
      if (!id->rootless) {
        std::string why;
        spec.fs.earlierFd = idmappedWorkspace(*earlier, id->uid, id->gid, &why);
        if (spec.fs.earlierFd < 0) {
          return error("sandbox: the earlier run's layer cannot be idmapped: " + why);
        }
        closer.fds.push_back(spec.fs.earlierFd);
      }
    }
  }
  if (options.transparent) planResolvConf(&spec.fs);
  spec.fs.uid = id->uid;
  spec.fs.gid = id->gid;
  planRunFiles(options, &spec.fs, &result.warnings);
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
  // A directory (or an O_PATH descriptor) as a standard stream is a handle on the host's tree
  // outside the view: fchdir(0) would leave the read-only root. Such a stream becomes /dev/null.
  int* stdio[3] = {&spec.stdinFd, &spec.stdoutFd, &spec.stderrFd};
  for (int i = 0; i < 3; ++i) {
    int fd = *stdio[i] >= 0 ? *stdio[i] : i;
    struct stat st {};
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fstat(fd, &st) != 0) continue;  // closed: the command gets it closed too
    if (!S_ISDIR(st.st_mode) && (fl & O_PATH) == 0) continue;
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0) return error(sysFailure("replace a directory on stdio", "open /dev/null", errno));
    closer.fds.push_back(null);
    *stdio[i] = null;
    result.warnings.push_back(std::string(i == 0   ? "stdin"
                                          : i == 1 ? "stdout"
                                                   : "stderr") +
                              " is a directory or an O_PATH descriptor, a way out of the "
                              "sandbox's view: the command gets /dev/null instead");
  }
  spec.launcherPid = getpid();
  spec.watchExecs = static_cast<bool>(options.onExec);
  spec.bindWorkspace = bind;

  if (auto threads = threadCount(); threads && *threads > 1) {
    return error("sandbox: refusing to fork the sandbox from a process with " +
                 std::to_string(*threads) +
                 " threads: its child could hang on a lock another thread holds (start threads "
                 "in run()'s StartedCallback)");
  }
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
          requested + "); --allow-unenforced runs without it");
    }
    for (const auto& u : result.unenforced) {
      if (!isDefault(u)) continue;
      result.warnings.push_back("default limit not enforced on this machine, running without it: " +
                                u);
    }
    // Each warning of the setup is logged once, here, before the command's first line (a
    // failed write it explains comes after it); the caller reads them from the result and does
    // not repeat them. Escaped: a warning may name a file the workload wrote in an earlier run.
    for (const auto& w : result.warnings) spdlog::warn("sandbox: {}", escapeText(w, true));
    if (!requested.empty()) {  // in the result as `unenforced`
      spdlog::warn("sandbox: running WITHOUT these limits (--allow-unenforced): {}",
                   escapeText(requested, true));
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
  SupervisedOutcome out = supervise(sv[0], outer, *id, cgroup.get(), deadline, options.killGrace,
                                    {onListeners, onCapture, onStarted, options.onExec}, &result);
  close(sv[0]);
  int outerStatus = 0;
  while (waitpid(outer, &outerStatus, 0) < 0 && errno == EINTR) {
  }
  CgroupStats stats = cgroup ? cgroup->stats() : CgroupStats{};
  cgroup.reset();  // removes the directories: every process of the run is gone
  // Nothing of the run can write the workspace any more.
  if (bind) result.sweep = sweepWorkspace(ws->fd, &result.warnings);

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
  // A setup failure is the caller's to say (sandgate run prints it once, with its context).
  return result;
}

}  // namespace sandgate::sandbox
