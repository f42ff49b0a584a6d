// Copying an overlay upper layer from the sandbox's sized tmpfs (--disk) to the run's
// directory on the host once the workload is gone: files, directories, links, whiteouts and
// opaque directories as overlayfs wrote them, nothing followed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace sandgate::sandbox {

// Copies everything under the directory `from` into the (empty) directory `to`, both opened
// O_RDONLY|O_DIRECTORY, as their owner without any capability: a file or directory the
// workload made unreadable (EACCES) is made readable by its owner first (the copy gets the
// original mode). Whiteouts (0/0 character devices) are made again (the kernel lets anyone make
// them), user.overlay.* xattrs are copied, FIFOs and sockets are skipped. Returns "" or the
// failure.
std::string copyUpperLayer(int from, int to);

// What copyTree copied: regular files, their bytes, and how many of them are reflinks (the
// filesystem shares their extents: no data was copied).
struct CopyStats {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t reflinked = 0;
};

// The workspace copy (overlay mode's fallback, see launcher.h): everything under `from` into
// the empty `to` as copyUpperLayer copies it, each file reflinked where the filesystem can,
// then all of it (`to` included) given to `uid`/`gid` (a root launcher's run identity; chown
// clears setuid and setgid bits). Nothing under `from` is changed: an entry it cannot read
// (root squashed by NFS) fails the copy instead of being made readable. Returns "" or the
// failure.
std::string copyTree(int from, int to, uid_t uid, gid_t gid, CopyStats* stats);

// One entry `name` of the directory `fromDir` (and, for a directory, everything in it) copied
// into `toDir` the same way. Returns "" or the failure.
std::string copyLayerEntry(int fromDir, int toDir, const std::string& name);

// Removes `name` from the directory `dir` (a directory with everything in it), following no
// link; nothing there is no failure. Returns "" or the failure.
std::string removeLayerEntry(int dir, const std::string& name);

}  // namespace sandgate::sandbox
