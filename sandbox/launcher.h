// The namespace launcher behind `sandgate run`: runs one command in fresh user, mount, PID,
// network, UTS, IPC and cgroup namespaces whose only network is a listener handed to the proxy.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "sandbox/capture_net.h"
#include "sandbox/workspace_sweep.h"

namespace sandgate::sandbox {

// What to run and how to confine it.
//
// Identity: the workload never runs as root on the host. The user namespace maps exactly one
// uid and one gid, identity-mapped (inside uid == host uid), and the command runs as that uid
// without capabilities:
//  - launcher running as root: a uid of its own for every run, leased from
//    [idRangeFirst, idRangeFirst + idRangeCount) (gid = uid), never one the host's user or group
//    database knows, so that no two runs (of one task or of different ones) share files,
//    sockets or signals. The workspace is an idmapped mount in which the workspace owner's files
//    belong to that uid, so a root-owned checkout is writable inside, and what the run creates
//    belongs to the workspace's owner on the host. `uid` (not 0) and `gid` override the lease.
//  - launcher not root (rootless): the launcher's own uid/gid; `uid`/`gid` must be unset or equal.
//    The kernel lets an unprivileged user namespace neither drop the launcher's supplementary
//    groups nor idmap a mount: files those groups may write stay writable, where the view shows
//    them (the workspace, nothing else writable).
struct Options {
  std::vector<std::string> argv;  // argv[0] is looked up in the sandbox's PATH unless it has '/'
  // Read-write, the command's cwd; default: the launcher's cwd. Opened without following links
  // and refused where unsafe (see workspace.h).
  std::string workspace;
  // How the sandbox sees the workspace:
  //  - kBind: the directory itself, read-write (through the idmapped mount for a root launcher):
  //    what the run writes is written on the host at once. The run has the workspace to itself
  //    (lockWorkspace: a second run in it is refused), may set no setuid/setgid bit or file
  //    capability (bind_filter.h), and the workspace is swept for them once the run is over
  //    (RunResult::sweep).
  //  - kOverlay: the directory is the read-only lower layer of an overlay mount whose upper
  //    layer and overlay work directory are `overlayDir`/upper and `overlayDir`/work, which
  //    run() creates, owned by the run's uid. The host's directory is never written; the upper
  //    layer holds every change (whiteouts for deletions, opaque directories). For a root
  //    launcher the lower layer is the idmapped workspace, so that a root-owned file is the
  //    run's uid's inside and can be copied up; the overlay is mounted in the sandbox's user
  //    namespace (userxattr, redirect_dir=nofollow: a renamed directory is copied, never
  //    redirected). Copy fallback: a root launcher whose workspace cannot be idmapped (a filesystem
  //    without idmapped mounts, e.g. ramfs, NFS) could copy up none of the root-owned files, so it
  //    copies the workspace to `overlayDir`/upper instead (reflinks where the filesystem has
  //    them), gives the copy to the run's uid and binds it as the workspace: the host's
  //    directory is still never written, and RunResult::workspaceCopy says why. No --disk,
  //    --from or --resume then.
  enum class WorkspaceMode { kBind, kOverlay };
  WorkspaceMode workspaceMode = WorkspaceMode::kBind;
  // kOverlay: an empty directory of the launcher's own, outside the workspace (the run's
  // directory keeps it, e.g. <run>/overlay); opened without following links.
  std::string overlayDir;
  // kOverlay: bounds what the run writes to the workspace (--disk). The upper layer is a tmpfs
  // of this size inside the sandbox (its pages count in the memory limit; beyond it writes fail
  // with ENOSPC, the host's disk is untouched), copied to overlayDir/upper by the sandbox's
  // PID 1 once the command has ended and every other process of the sandbox is killed: holes
  // and hard links kept, no more than this many bytes of file data (a warning names what was
  // left out), setuid/setgid dropped (layer_copy.h).
  std::optional<uint64_t> diskBytes;
  // kOverlay: an earlier run's upper layer (--from, --resume), a read-only layer between the
  // workspace and this run's upper layer: the files are where that run left them. Root
  // launcher: idmapped (its owner → this run's uid) so that its files can be copied up.
  std::string earlierLayer;
  std::map<std::string, std::string> env;  // extra variables (placeholders, --env); win last
  std::string extraCaPem;                  // appended to the host's root bundle (sandgate's CA)
  // Read-only files under /run/sandgate (relative name → text), e.g. the run's ssh config and
  // known_hosts; and files in the home (relative name → text, mode 0600), e.g. .ssh/config.
  // Public material only: the sandbox never holds a secret (run_files.h).
  std::map<std::string, std::string> runFiles;
  std::map<std::string, std::string> homeFiles;
  // Show this sandgate binary read-only at /run/sandgate/bin/sandgate (ssh's ProxyCommand).
  bool showSandgate = false;
  std::optional<uint64_t> memoryBytes;
  std::optional<double> cpus;
  std::optional<uint32_t> pids;  // counts the launcher's two helpers (outer child, PID 1) too
  std::optional<std::chrono::milliseconds> timeout;  // wall clock, from the start of run()
  // Limits that are defaults rather than requests (the built-in or `sandbox:` config, no flag):
  // where the machine cannot enforce one, the run goes on with a warning instead of refusing.
  bool memoryIsDefault = false;
  bool cpusIsDefault = false;
  bool pidsIsDefault = false;
  // Size of each private tmpfs (/tmp, /run, /dev/shm); their pages count in the memory limit.
  uint64_t tmpfsBytes = 1ull << 30;
  // Host directories the sandbox sees read-only besides the system ones (--ro, sandbox.ro).
  std::vector<std::string> readOnlyPaths;
  // Root-launched runs: each run takes its own uid and gid from [first, first + count), never
  // one the host's user or group database knows (sandbox.id_range).
  uint32_t idRangeFirst = 0x7E000000;
  uint32_t idRangeCount = 65536;
  std::chrono::milliseconds killGrace{5000};  // SIGTERM → SIGKILL after a timeout
  std::vector<std::string> hiddenPaths;       // config secret files, CA key, admin socket, ...
  bool allowUnenforced = false;               // run even when a requested limit cannot be enforced
  // Called once on run()'s thread after the cgroup is made and before anything is forked,
  // with RunResult::unenforced: where the caller says which limits are in force.
  std::function<void(const std::vector<std::string>& unenforced)> onLimits;
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  uint16_t proxyPort = 3128;
  std::string hostname = "sandbox";
  std::string home = "/tmp/home";  // HOME inside the sandbox (created in the private /tmp)
  uint64_t maxOpenFiles = 4096;    // RLIMIT_NOFILE (capped at the launcher's hard limit)
  bool devPts = true;              // a private /dev/pts (a warning, not a failure, if refused)
  // Transparent capture: a DNS stub at 127.0.0.53:53 (written into the sandbox's
  // /etc/resolv.conf), the synthetic ranges routed to lo, and listeners on the capture ports,
  // all handed to the CaptureCallback. Off: only the proxy listeners exist.
  bool transparent = false;
  CaptureSpec capture{{80, 443}, "198.18.0.0/15", "fd53:4744:4e53::/64"};
  // Called on run()'s thread for every execve/execveat in the sandbox, the command's own first
  // (exec_watch.h: a seccomp user notification; the call waits for the callback). Unset: execs
  // are not watched.
  std::function<void(const struct ExecEvent&)> onExec;
  // Standard streams of the command; -1 = inherit the launcher's.
  int stdinFd = -1;
  int stdoutFd = -1;
  int stderrFd = -1;
};

struct RunResult {
  enum class End { kExited, kSignaled, kTimeout, kMemoryLimit, kSetupFailed };

  // The command's exit status; 128+N when killed by signal N (a memory-limit kill stays 137 and
  // says kMemoryLimit); 124 after a timeout; 125 when the sandbox could not be set up; 126/127
  // when the command could not be executed / was not found.
  int exitStatus = 0;
  End end = End::kExited;
  double seconds = 0;
  std::optional<uint64_t> peakMemoryBytes;  // when a memory cgroup could be read
  bool pidsLimitReached = false;            // fork/clone was refused by the pids limit
  std::string error;                        // kSetupFailed: step, system call and errno
  std::vector<std::string> warnings;        // degraded features (e.g. no /dev/pts, no IPv6)
  // Every warning run() adds is logged (spdlog, warn) as it happens or before the command
  // starts: a caller that lists them again at the end says each twice.
  std::vector<std::string> unenforced;      // limits requested but not enforced (allowUnenforced)
  // kOverlay that fell back to a copy of the workspace (see Options): why, and what the copy
  // took (files, bytes, reflinks); empty otherwise.
  std::string workspaceCopy;
  // kBind: what the end-of-run sweep cleared and could not check (workspace_sweep.h).
  std::optional<WorkspaceSweep> sweep;
  uid_t uid = 0;  // the identity the command ran as
  gid_t gid = 0;
};

// "exited", "signaled", "timeout", "oom", "setup_failed" (stable tokens for the report).
const char* endName(RunResult::End end);

// Exit statuses the launcher itself produces.
inline constexpr int kExitTimeout = 124;
inline constexpr int kExitSetupFailed = 125;
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitNotFound = 127;

// Receives the sandbox's listening sockets (127.0.0.1:proxyPort and, when the kernel has IPv6,
// [::1]:proxyPort; blocking, close-on-exec). They live in the sandbox's network namespace but
// stay valid in the launcher; ownership passes to the callback (the proxy adopts them, e.g.
// `Server::adoptListener(fd, task)`). Called on the thread that called run(), before the command
// starts: the command is only exec'd after the callback returns. An exception aborts the run.
using ListenerCallback = std::function<void(std::vector<int> listenerFds)>;

// Transparent mode: receives the DNS stub's sockets and the capture listeners (ownership
// passes), on the same thread and just before the ListenerCallback.
using CaptureCallback = std::function<void(CaptureSockets sockets)>;

// Called on the thread that called run(), once, right after the sandbox's first process is
// forked and before any other callback: the place to start the proxy's threads. run() forks
// only a single-threaded process, because the child of a multithreaded one does far more than
// async-signal-safe calls before its exec (allocations, C++ exceptions, file streams) and would
// hang forever on a lock (in malloc, a sanitizer's runtime, the unwinder) that another thread
// held at the fork. An exception aborts the run.
using StartedCallback = std::function<void()>;

// Runs the command and returns how it ended. Blocks until every process of the sandbox is gone
// and its cgroups are removed. An error Result means nothing was started (bad options, a limit
// that cannot be enforced, a caller with other threads running); failures inside the sandbox are
// a RunResult with kSetupFailed. Call from a thread that lives until run() returns (the sandbox
// gets PR_SET_PDEATHSIG from it), with no other thread running (see StartedCallback).
Result<RunResult> run(const Options& options, const ListenerCallback& onListeners,
                      const CaptureCallback& onCapture = {}, const StartedCallback& onStarted = {});

// The number of threads of this process (from /proc/self/status), or nullopt when /proc cannot
// tell.
std::optional<int> threadCount();

}  // namespace sandgate::sandbox
