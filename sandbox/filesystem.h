// The sandbox's view of the filesystem: planned in the launcher (paths resolved, homes found),
// built in the sandbox's mount namespace (read-only host root, private /tmp /run /dev /proc,
// writable workspace, hidden secrets) and entered with pivot_root.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "sandbox/launcher.h"

namespace sandgate::sandbox {

struct MountStep {
  enum class Kind {
    kTmpfs,      // a private, writable tmpfs (/tmp, /run)
    kDev,        // tmpfs /dev with bind-mounted null, zero, full, random, urandom, tty
    kProc,       // a new procfs for the new PID namespace
    kHideDir,    // an empty read-only tmpfs over a directory
    kHideFile,   // /dev/null bound over a file (or a socket, a device)
    kWorkspace,  // the workspace, bound read-write from the host
  };
  Kind kind;
  std::string path;  // absolute, resolved on the host (no symlinks)
};

struct FilesystemPlan {
  std::vector<MountStep> steps;  // in order: parents before children, workspace after hiding
  std::string workspace;         // resolved
  std::string home;              // created in the private /tmp
  std::string caBundle;          // contents of kCaBundlePath
  std::string caSystemTarget;    // the host system bundle, resolved ("" when absent)
  std::string resolvConf;        // transparent mode: our resolv.conf ("" = the host's)
  std::string resolvConfTarget;  // the host's /etc/resolv.conf, symlinks followed
  bool devPts = true;
  uid_t uid = 0;
  gid_t gid = 0;
};

// The secret locations hidden under every home directory listed in /etc/passwd.
const std::vector<std::string>& homeSecretNames();

// Launcher side. `workspace` must be resolved already. Hidden paths are resolved with
// realpath(3) so that a symlink cannot redirect a mount; paths that do not exist are dropped
// (there is nothing to see), as are paths under /tmp, /run, /dev or /proc (replaced anyway)
// unless they lie inside the workspace.
FilesystemPlan planFilesystem(const Options& options, const std::string& workspace);

// Sandbox side (in the new user + mount namespaces, before exec): builds the new root and
// pivots into it. Throws SetupError naming the failing step; `warnings` gets degraded features.
void buildFilesystem(const FilesystemPlan& plan, std::vector<std::string>* warnings);

}  // namespace sandgate::sandbox
