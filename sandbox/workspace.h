// The workspace as the launcher checks it: opened without following links, refused where it
// would hand the workload something it must not write, and (root) turned into an idmapped mount.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"

namespace sandgate::sandbox {

struct CheckedWorkspace {
  std::string path;  // canonical, as the kernel names the directory that was opened
  int fd = -1;       // O_PATH descriptor of that directory (the caller closes it)
  struct stat st {};
};

// Opens `path` (the current directory when empty) with no symbolic link followed in any
// component — a link planted by an earlier run cannot send this one elsewhere — and refuses a
// workspace that is unsafe to make writable, decided on the canonical path of the directory
// opened: /, the shared directories (/tmp, /var/tmp, /home, /srv, /mnt, ...), the system
// directories (/usr, /usr/lib, /usr/share, /usr/local, /var, /var/lib, /var/log, /var/spool,
// /boot, /lib*, /bin, /sbin, /opt, ...) and each directory directly in one of them (a directory
// made for work below them, /var/lib/ci/checkout, is allowed), anything under /proc, /dev,
// /sys, /run or /etc, a home directory itself, and any directory that is or holds one of
// `hiddenPaths` (the config, a secret, the CA key): the error says what to do instead.
Result<CheckedWorkspace> openWorkspace(const std::string& path,
                                       const std::vector<std::string>& hiddenPaths);

// Root launcher: a detached copy of the workspace's mount (open_tree) whose files owned by the
// workspace's owner and group appear as `uid`/`gid` inside, and what that uid creates is owned
// by the workspace's owner on the host; nosuid, nodev. Returns the mount's descriptor, or -1
// with the reason in `why` (a filesystem without idmapped mounts, an old kernel).
int idmappedWorkspace(const CheckedWorkspace& ws, uid_t uid, gid_t gid, std::string* why);

// One bind run at a time per workspace: a run in bind mode shares the host directory (its
// sockets, FIFOs, files) with anything else running in it, so a relay one task leaves there
// would lend its proxy access to another. `exclusive` (bind mode) takes flock(LOCK_EX) on the
// workspace directory itself, any other run LOCK_SH (overlay runs share a workspace, but not
// with a bind run). A bind run also holds each directory above the workspace shared, so that
// bind runs of nested directories (/p and /p/sub: the outer one sees the inner one's sockets)
// exclude each other; bind runs of siblings do not. Overlay runs cannot connect to a socket in
// their lower layer (the overlay's inode is not the one the socket is bound to), so they take
// no such lock. The locks live on the directories' inodes, so a root and a rootless launcher
// see each other's, and nothing is written into the workspace. Returns every descriptor
// holding a lock (close them when the run is over) or the refusal: "in use by another run".
Result<std::vector<int>> lockWorkspace(const CheckedWorkspace& ws, bool exclusive);

// Overlay mode: creates upper/ and work/ (0700) in `dir` (an empty directory the launcher owns,
// opened without following links, not inside the workspace `ws`), makes `dir` and both of them
// the run's `uid`/`gid`'s, and returns them as the sandbox will attach them: a detached mount of
// `dir` (root launcher: open_tree, nosuid, nodev, noexec) in `fd`, or -1 and the directory's
// path, device and inode for the sandbox to check (rootless: it can reach the path itself).
struct OverlayLayers {
  int fd = -1;
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
};
Result<OverlayLayers> prepareOverlayLayers(const std::string& dir, const CheckedWorkspace& ws,
                                           uid_t uid, gid_t gid, bool rootless);

// Overlay mode's fallback for a root launcher (see Options::WorkspaceMode): copies the
// workspace `ws` into `dir`/upper (made by prepareOverlayLayers), reflinked where the
// filesystem can, gives it to `uid`/`gid`, and returns it as a detached mount (open_tree,
// nosuid, nodev) for the sandbox to bind as the workspace, with `why` (the reason overlay
// cannot serve) and what the copy took, for the report.
struct WorkspaceCopy {
  int fd = -1;
  std::string why;
};
Result<WorkspaceCopy> copyWorkspace(const CheckedWorkspace& ws, const std::string& dir, uid_t uid,
                                    gid_t gid, const std::string& why);

}  // namespace sandgate::sandbox
