// Copying an overlay upper layer from the sandbox's sized tmpfs (--disk) to the run's
// directory on the host once the workload is gone, and from one run's layer to the next
// (--from, --resume): files, directories, links, FIFOs, whiteouts and opaque directories as
// overlayfs wrote them, nothing followed. Every copy keeps holes as holes and hard links as
// links, so that what lands on the host's disk is no larger than what the layer held, and drops
// setuid and setgid bits, so that no copy is a privilege another user could run.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace sandgate::sandbox {

// What copyTree copied: regular files, their bytes, and how many of them are reflinks (the
// filesystem shares their extents: no data was copied).
struct CopyStats {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t reflinked = 0;
};

// How a layer is copied.
struct LayerCopyOptions {
  // A root launcher: every entry is given to this uid/gid (the run's), so that no copy of the
  // workload's data is root's. (uid_t)-1: left as the copier's.
  uid_t uid = static_cast<uid_t>(-1);
  gid_t gid = static_cast<gid_t>(-1);
  // --disk: at most this many bytes of file data are written to the host (0: no bound). A file
  // that would pass it is left out, and named in LayerCopyOutcome.
  uint64_t maxBytes = 0;
};

// What a bounded copy left out: the first kMaxNamed paths (relative to the layer) and how many.
struct LayerCopyOutcome {
  static constexpr size_t kMaxNamed = 10;
  uint64_t bytes = 0;  // file data written (holes and extra links cost nothing)
  uint64_t files = 0;
  uint64_t links = 0;  // hard links made instead of copies
  std::vector<std::string> notCopied;
  uint64_t notCopiedCount = 0;
  uint64_t notCopiedBytes = 0;
};

// Copies layer entries into one destination tree `to` (an O_RDONLY|O_DIRECTORY descriptor the
// caller keeps open), remembering every regular file with more than one link by its device and
// inode, so that a second name of it is made a hard link to the first copy, across calls.
class LayerCopier {
 public:
  LayerCopier(int to, LayerCopyOptions options) : to_(to), options_(options) {}

  // Everything under `from` into the directory `toRel` of the tree ("" for its top, opened as
  // `toDir`). Returns "" or the failure.
  std::string copyAll(int from, int toDir, const std::string& toRel = "");
  // One entry `name` of `fromDir` (a directory with everything in it) into `toDir` (the
  // tree's directory `toRel`). Returns "" or the failure.
  std::string copyEntry(int fromDir, int toDir, const std::string& toRel, const std::string& name);

  const LayerCopyOutcome& outcome() const { return outcome_; }
  // Set by copyTree: count into `stats`; never touch the source (its modes stay as they are).
  void countInto(CopyStats* stats) { stats_ = stats; }
  void sourceReadOnly() { sourceReadOnly_ = true; }

 private:
  std::string entry(int from, int to, const std::string& rel, const char* name, int depth);
  std::string dir(int from, int to, const std::string& rel, int depth);
  std::string file(int fromDir, int toDir, const std::string& rel, const char* name,
                   const struct stat& st);
  void own(int dirFd, const char* name, int fd);
  bool linkTo(const std::string& rel, int toDir, const char* name);

  int to_;
  LayerCopyOptions options_;
  LayerCopyOutcome outcome_;
  CopyStats* stats_ = nullptr;
  bool sourceReadOnly_ = false;
  std::map<std::pair<dev_t, ino_t>, std::string> linked_;  // source inode -> path in the copy
};

// Copies everything under the directory `from` into the (empty) directory `to`, both opened
// O_RDONLY|O_DIRECTORY, without any capability: a file or directory the workload made
// unreadable (EACCES) is made readable by its owner first (the copy gets the original mode
// without setuid/setgid). Whiteouts (0/0 character devices) and FIFOs are made again (the
// kernel lets anyone make them), user.overlay.* xattrs are copied, sockets are skipped.
// Returns "" or the failure; `outcome` (optional) says what a bounded copy left out.
std::string copyUpperLayer(int from, int to, const LayerCopyOptions& options = {},
                           LayerCopyOutcome* outcome = nullptr);

// The workspace copy (overlay mode's fallback, see launcher.h): everything under `from` into
// the empty `to` as copyUpperLayer copies it, each file reflinked where the filesystem can,
// all of it (`to` included) given to `uid`/`gid` (a root launcher's run identity). Nothing
// under `from` is changed: an entry it cannot read (root squashed by NFS) fails the copy
// instead of being made readable. Returns "" or the failure.
std::string copyTree(int from, int to, uid_t uid, gid_t gid, CopyStats* stats);

// Removes `name` from the directory `dir` (a directory with everything in it), following no
// link; nothing there is no failure. Returns "" or the failure.
std::string removeLayerEntry(int dir, const std::string& name);

}  // namespace sandgate::sandbox
