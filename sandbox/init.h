// The sandbox's PID 1 (builds the sandbox, hands the listeners over, reaps, forwards signals)
// and the command it starts.
#pragma once

#include "sandbox/outer_child.h"

namespace sandgate::sandbox {

// PID 1 of the new PID namespace, running as the sandbox uid with capabilities in the new user
// namespace only: hostname, filesystem, loopback and listeners (sent to the launcher with
// SCM_RIGHTS, then closed here), waits for the launcher's go, forks the command, drops its own
// capabilities, then reaps children and forwards SIGTERM/SIGHUP/SIGINT/SIGQUIT to every process
// of the sandbox (SIGUSR1/SIGUSR2 to the command) until the command exits. It leads the
// sandbox's own session (setsid). Its exit tears the namespace down: the kernel kills what is
// left.
[[noreturn]] void runInit(const ChildSpec& spec);

}  // namespace sandgate::sandbox
