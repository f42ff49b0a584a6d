// The sandbox's view of the filesystem: planned in the launcher (paths resolved, secrets and
// system directories found), built in the sandbox's mount namespace and entered with pivot_root.
//
// The view is an allowlist, never the host's `/` with holes: an empty root tmpfs holding the
// system directories read-only (/usr, /bin, /sbin, /lib*, /etc with its secrets hidden), what the
// caller adds read-only on purpose (--ro, sandbox.ro), the workspace, and private /tmp, /run,
// /dev, /dev/shm, /proc and /sys. Every other host directory (/var, /home, /srv, /opt, /mnt,
// /media, /nix, /snap, /root, ...) is an empty directory or absent: a host Unix socket stays
// connectable through a read-only bind, so the only safe socket is one the sandbox cannot see.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "sandbox/launcher.h"

namespace sandgate::sandbox {

struct MountStep {
  enum class Kind {
    kReadOnly,   // a host directory or file bound read-only (recursively) at the same path
    kSymlink,    // a symbolic link copied from the host (/bin -> usr/bin on merged-/usr hosts)
    kEmptyDir,   // an empty directory in the root (/var, /home, ...)
    kTmpfs,      // a private, writable, sized tmpfs (/tmp, /run)
    kDev,        // tmpfs /dev with bind-mounted null, zero, full, random, urandom, tty
    kProc,       // a new procfs for the new PID namespace
    kSys,        // a new sysfs for the new network namespace (falls back to an empty /sys)
    kHideDir,    // an empty read-only tmpfs over a directory
    kHideFile,   // /dev/null bound over a file (or a socket, a device)
    kLeaveOut,   // a shown directory rebuilt without the secrets in it (mount_ops buildWithout)
    kWorkspace,  // the workspace, read-write (see FilesystemPlan::workspaceFd)
  };
  Kind kind;
  std::string path;      // absolute, resolved on the host (no symlinks)
  std::string target{};  // kSymlink: the link's text
  std::vector<std::string> leaveOut{};  // kLeaveOut: the names left out of `path`
};

struct FilesystemPlan {
  std::vector<MountStep> steps;  // in order: parents before children, hiding after binding
  std::string workspace;         // resolved
  // The workspace as the launcher checked it. Root: a detached mount (open_tree), idmapped so
  // that the workspace owner's files belong to the run's uid inside; rootless or where the
  // filesystem cannot be idmapped, -1, and the sandbox binds the directory whose device and inode
  // are these (it reopens the path without following a link and checks it is the same one).
  int workspaceFd = -1;
  dev_t workspaceDev = 0;
  ino_t workspaceIno = 0;
  // Overlay mode (Options::WorkspaceMode::kOverlay): the workspace above is the lower layer and
  // the directory holding upper/ and work/ is, like it, a detached mount (root: open_tree) or a
  // path the sandbox reopens and checks by device and inode (rootless: layersFd = -1).
  bool overlay = false;
  int layersFd = -1;
  std::string layers;
  dev_t layersDev = 0;
  ino_t layersIno = 0;
  // --disk: the upper layer lives on a tmpfs of this size in the sandbox (its pages count in
  // the memory limit; beyond it writes fail with ENOSPC), copied to layers/upper once the
  // workload is gone (0: the upper layer is layers/upper itself, unbounded).
  uint64_t diskBytes = 0;
  // Options::earlierLayer, attached like the workspace (a detached idmapped mount, or a path
  // checked by device and inode); empty: none.
  std::string earlier;
  int earlierFd = -1;
  dev_t earlierDev = 0;
  ino_t earlierIno = 0;
  std::string home;              // created in the private /tmp
  std::string caBundle;          // contents of kCaBundlePath
  std::string caSystemTarget;    // the host system bundle, resolved ("" when absent)
  std::string resolvConf;        // transparent mode: our resolv.conf ("" = the host's)
  std::string resolvConfTarget;  // the host's /etc/resolv.conf, symlinks followed
  uint64_t tmpfsBytes = 1ull << 30;
  bool devPts = true;
  // run_files.h: /etc/passwd and /etc/group with the run's uid and gid in them (home = `home`),
  // Options::runFiles and homeFiles, and the host path of the binary to show ("" = none).
  std::string passwd;
  std::string group;
  std::map<std::string, std::string> runFiles;
  std::map<std::string, std::string> homeFiles;
  std::string sandgateBinary;
  uid_t uid = 0;
  gid_t gid = 0;
};

// The host directories every sandbox sees read-only (those that exist; symlinks are copied).
const std::vector<std::string>& systemDirectories();
// The directories that exist only as empty directories in the sandbox's root.
const std::vector<std::string>& emptyDirectories();
// Secrets of the host's /etc (shadow, sudoers, ssh host keys, TLS private keys, cluster admin
// configs, ...), hidden in the read-only /etc.
const std::vector<std::string>& etcSecrets();

// What hides a secret file: the directory that holds it, so that a rotation (a rename over it,
// a Kubernetes `..data` swap) can never show the new one, and the Kubernetes mount root when the
// file sits under `..data` or a `..<timestamp>` directory. A file directly in a system directory
// (/etc/key) or in / hides only itself: `whole` says which.
struct HiddenPath {
  std::string path;
  bool whole = true;  // false: only the file is hidden (a rotation could show the new one)
};
HiddenPath hidingPathFor(const std::string& resolvedFile);

// Launcher side. `workspace` must be resolved already. Hidden paths are resolved with
// realpath(3) so that a symlink cannot redirect a mount; paths that do not exist are dropped
// (there is nothing to see), as are those outside every directory the view shows. `warnings`
// gets what cannot be hidden as well as asked.
FilesystemPlan planFilesystem(const Options& options, const std::string& workspace,
                              std::vector<std::string>* warnings = nullptr);

// With plan.diskBytes: the sized upper layer and the run's layers/upper, open (O_RDONLY,
// close-on-exec) for copyUpperLayer once the workload is gone.
struct DiskLayer {
  int upper = -1;
  int target = -1;
  uint64_t maxBytes = 0;  // the --disk size: the copy writes no more file data than this
};

// Sandbox side (in the new user + mount namespaces, before exec): builds the new root and
// pivots into it. Throws SetupError naming the failing step; `warnings` gets degraded features.
void buildFilesystem(const FilesystemPlan& plan, std::vector<std::string>* warnings,
                     DiskLayer* disk = nullptr);

}  // namespace sandgate::sandbox
