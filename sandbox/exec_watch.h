// exec.jsonl's source: every execve/execveat of the sandbox, seen by the launcher through a
// seccomp user notification that it records and lets continue. What it can see: the program
// path and arguments as the caller passed them, read from its memory when the call is made (a
// second thread of the caller could change them before the kernel reads them: the record is
// what was asked, not proof of what ran), the pid and parent pid. What it cannot: the exit
// status (seccomp sees calls, not exits), and a program started without execve (there is none:
// every exec goes through these two calls). A failed attempt (a PATH search trying each
// directory) is recorded too: the record is made before the kernel looks for the file. An exec
// of a descriptor (fexecve, /proc/self/fd/N) records the descriptor's target as well, and says
// when it is a memfd (a program written to memory, in no file the review would see).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace sandgate::sandbox {

struct ExecEvent {
  double time = 0;        // seconds since the epoch
  pid_t pid = 0;          // in the sandbox's PID namespace (0 when it could not be read)
  pid_t ppid = 0;         // the same, of its parent
  pid_t hostPid = 0;      // as the launcher sees it
  std::string path;       // as passed (relative to the cwd or, for execveat, to a descriptor)
  // What the path names when the path alone does not say, read from the caller's descriptor
  // table at the call: an execveat of a descriptor (fexecve: an empty path), a path relative to
  // a descriptor, /proc/self/fd/N or /dev/fd/N. Empty otherwise (the path says it).
  std::string target;
  bool memfd = false;  // the program is a memfd: code that exists in no file of the sandbox
  std::vector<std::string> argv;  // at most kMaxExecArgs, each at most kMaxExecArgBytes
  bool argvCut = false;   // more arguments or longer ones than that
  bool execveat = false;
  // False when the caller's memory could not be read: a rootless launcher may not read a
  // process that is not dumpable, which the command is until its own first exec (it is a copy
  // of the launcher's memory until then); the path and arguments are then unknown.
  bool readable = true;
};

inline constexpr size_t kMaxExecArgs = 64;
inline constexpr size_t kMaxExecArgBytes = 1024;

// Sandbox side (the command, after no_new_privs and before its own exec): a filter whose
// execve and execveat wait for the launcher. Returns the notification descriptor. Throws
// SetupError.
int loadExecNotifyFilter();

// Launcher side: takes one notification from `notifyFd`, describes it and lets the call go on.
// False when the descriptor is done (every process of the sandbox is gone).
bool takeExecNotification(int notifyFd, ExecEvent* event);

}  // namespace sandgate::sandbox
