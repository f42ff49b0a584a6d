// The sandbox's processes as seen from the launcher: what each needs (built before fork) and the
// outer child that creates the namespaces and waits for the sandbox's PID 1.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sandbox/capture_net.h"
#include "sandbox/filesystem.h"
#include "sandbox/identity.h"

namespace sandgate::sandbox {

// Everything the forked processes use, prepared by the launcher so that they only execute it.
struct ChildSpec {
  Identity id;
  FilesystemPlan fs;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "K=V"
  std::string hostname;
  uint16_t proxyPort = 3128;
  bool transparent = false;
  CaptureSpec capture;
  uint64_t maxOpenFiles = 4096;
  int stdinFd = -1, stdoutFd = -1, stderrFd = -1;
  pid_t launcherPid = 0;
  bool watchExecs = false;     // Options::onExec is set
  bool bindWorkspace = false;  // Options::WorkspaceMode::kBind: the bind filter is loaded
  int channel = -1;            // the sandbox end of the control socketpair
};

// Runs in the process fork()ed by the launcher:
//  1. dies with the launcher (PR_SET_PDEATHSIG), leaves the launcher's session (setsid),
//     closes every inherited descriptor but the channel and stdio, waits until the launcher
//     has put it in the run's cgroup;
//  2. as root: drops supplementary groups (they would survive into the user namespace and keep
//     granting host group access);
//  3. unshare(CLONE_NEWUSER|NEWNS|NEWPID|NEWNET|NEWUTS|NEWIPC|NEWCGROUP) and waits for the
//     launcher to write the id maps (a root launcher may map any uid; the process itself could
//     only map its own, i.e. root);
//  4. becomes the sandbox uid/gid, forks the sandbox's PID 1 (runInit), reports its pid, waits
//     for it and reports its wait status.
[[noreturn]] void runOuterChild(const ChildSpec& spec);

// Blocks for the launcher's kGo; exits quietly when the launcher is gone. Throws SetupError.
void waitForGo(int channel);

}  // namespace sandgate::sandbox
