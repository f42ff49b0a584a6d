// The launcher's side of a running sandbox: the control channel's protocol (id maps, listener
// hand-off, exit statuses), the exec notifications, the signals a user sends `sandgate run`, and
// the wall-clock timeout with its SIGTERM → SIGKILL escalation.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "sandbox/launcher.h"

namespace sandgate::sandbox {

class Cgroup;
struct Identity;

// At most this many exec notifications are answered per wake-up of the supervisor, so that the
// channel, the signals and the deadline get their turn however fast the sandbox execs.
inline constexpr int kExecsPerWakeup = 32;

struct SupervisedOutcome {
  std::string setupError;
  std::string execError;
  int execCode = 0;
  std::optional<int> commandStatus;
  std::optional<int> initStatus;
  bool timedOut = false;
};

struct SupervisedCallbacks {
  const ListenerCallback& onListeners;
  const CaptureCallback& onCapture;
  const StartedCallback& onStarted;
  const std::function<void(const struct ExecEvent&)>& onExec;
};

// Drives the protocol over `channel` until every sandbox process has closed it. `deadline`:
// when the run is timed out (SIGTERM to the sandbox's PID 1, SIGKILL `grace` later); it is
// checked on every wake-up, not only when the sandbox is quiet. Warnings go to `result`.
SupervisedOutcome supervise(int channel, pid_t outer, const Identity& id, Cgroup* cgroup,
                            std::optional<std::chrono::steady_clock::time_point> deadline,
                            std::chrono::milliseconds grace, const SupervisedCallbacks& callbacks,
                            RunResult* result);

}  // namespace sandgate::sandbox
