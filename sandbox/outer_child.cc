// The launcher's direct child: namespaces, id maps, identity, then waiting for the sandbox init.
#include "sandbox/outer_child.h"

#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/channel.h"
#include "sandbox/init.h"
#include "sandbox/launcher.h"
#include "sandbox/privileges.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {

void waitForGo(int channel) {
  Message m;
  RecvStatus s = receiveMessage(channel, -1, &m);
  if (s != RecvStatus::kMessage) _exit(kExitSetupFailed);  // the launcher is gone
  if (m.type != MsgType::kGo) {
    throw SetupError("sandbox: control channel: expected go, got message type " +
                     std::to_string(static_cast<uint32_t>(m.type)));
  }
}

void runOuterChild(const ChildSpec& spec) {
  const int ch = spec.channel;
  try {
    checkSys(prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "die with the launcher", "prctl");
    if (getppid() != spec.launcherPid) _exit(kExitSetupFailed);  // it died before prctl
    // Out of the launcher's session and process group: a terminal's ^C reaches the launcher
    // alone (which passes it on to PID 1), and nothing aimed at the sandbox's group or session
    // reaches us. PID 1 starts a session of its own for the same reason: as the same uid
    // (rootless) the workload could otherwise kill(0, SIGSTOP) us and the launcher would wait
    // for this process forever.
    checkSys(setsid(), "start a session of its own", "setsid");
    // Non-dumpable: nobody but root may read this copy of the launcher's memory. A rootless
    // launcher must still open /proc/<pid>/uid_map, which needs a dumpable target, until the
    // maps are written (its own uid could read its memory anyway).
    checkSys(prctl(PR_SET_DUMPABLE, spec.id.rootless ? 1 : 0, 0, 0, 0), "set dumpable", "prctl");
    const int stdio[3] = {spec.stdinFd, spec.stdoutFd, spec.stderrFd};
    for (int i = 0; i < 3; ++i) {
      if (stdio[i] >= 0 && stdio[i] != i) checkSys(dup2(stdio[i], i), "redirect stdio", "dup2");
    }
    // The launcher's descriptors (proxy sockets, config, secret files) never reach the sandbox.
    // The workspace's mount and the overlay layers' go to PID 1.
    closeOtherDescriptors({ch, spec.fs.workspaceFd, spec.fs.layersFd, spec.fs.earlierFd});
    waitForGo(ch);  // now in the run's cgroup: namespaces and children inherit it
    if (!spec.id.rootless)
      checkSys(setgroups(0, nullptr), "drop supplementary groups", "setgroups");
    checkSys(unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS |
                     CLONE_NEWIPC | CLONE_NEWCGROUP),
             "create namespaces", "unshare");
    if (!sendMessage(ch, MsgType::kUnshared)) throwSys("report namespaces", "sendmsg");
    waitForGo(ch);
    checkSys(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "set non-dumpable", "prctl");
    checkSys(setresgid(spec.id.gid, spec.id.gid, spec.id.gid), "become the sandbox gid",
             "setresgid");
    checkSys(setresuid(spec.id.uid, spec.id.uid, spec.id.uid), "become the sandbox uid",
             "setresuid");
    // Changing the effective ids cleared the parent-death signal (prctl(2)): without it again a
    // killed launcher would leave the sandbox running. If the launcher died in between, go.
    checkSys(prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "die with the launcher", "prctl");
    if (getppid() != spec.launcherPid) _exit(kExitSetupFailed);
    pid_t init = checkSys(fork(), "start the sandbox's PID 1", "fork");
    if (init == 0) runInit(spec);
    sendMessage(ch, MsgType::kInitPid, init);
    int status = 0;
    while (waitpid(init, &status, 0) < 0) {
      if (errno != EINTR) throwSys("wait for the sandbox's PID 1", "waitpid");
    }
    sendMessage(ch, MsgType::kInitExit, status);
    _exit(0);
  } catch (const std::exception& e) {
    sendMessage(ch, MsgType::kSetupError, 0, e.what());
  }
  _exit(kExitSetupFailed);
}

}  // namespace sandgate::sandbox
