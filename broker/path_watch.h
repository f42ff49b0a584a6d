// PathWatch: tells a file secret's reader, with one read(2), whether anything that decides what
// a path holds may have changed since it last looked (inotify).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace sandgate::broker {

// Watches `path` for every change that may alter what it names or holds: the file itself
// written, truncated, re-permissioned, removed or moved; and, in each directory on the way to
// it, the entry on the way created, removed, renamed over or re-permissioned. Symbolic links
// are followed as the kernel follows them, so the directories a link leads through are watched
// too: a Kubernetes Secret volume rotates by renaming a new `..data` link over the old one, in
// the volume's root, which the path `<volume>/<key>` -> `..data/<key>` passes. Events about
// other entries of those directories are read and ignored.
//
// What inotify cannot see — a file system mounted over a directory on the way, a write through
// a shared mapping, a network file system changed from another host — the caller catches with
// an occasional stat(2) (FileSource does it every second).
//
// Every PathWatch of the process shares one inotify instance, opened while any of them is
// armed: the kernel allows few instances per user (fs.inotify.max_user_instances, 128 by
// default, shared with every other program of that user), and each file credential of each
// configuration snapshot still in use has a PathWatch. Whoever reads the instance's events
// hands each to the PathWatches it concerns. Two PathWatches watching the same directory share
// its kernel watch, which stays while either needs it.
//
// One PathWatch is used by one thread at a time (FileSource calls it under its lock); different
// PathWatches may be used from different threads.
class PathWatch {
 public:
  enum class State {
    kQuiet,        // no relevant event since arm()
    kChanged,      // something on the path changed (or events were lost): look again
    kUnavailable,  // not armed: no inotify instance, a watch limit, an unreadable directory
  };

  explicit PathWatch(std::string path);
  ~PathWatch();
  PathWatch(const PathWatch&) = delete;
  PathWatch& operator=(const PathWatch&) = delete;

  // Discards pending events and places the watches for the path as it resolves now. Call it
  // before looking at the file: any change after it is an event. After a failure it does not
  // try again for a second (kUnavailable at once), so that a machine out of inotify watches
  // does not pay for a failing attempt on every request.
  State arm();
  // Since arm(): kChanged or kQuiet; kUnavailable when not armed. One read(2) of the shared
  // instance when nothing happened.
  State poll();
  // Why the last attempt to watch failed: the call, the path, the error and, for a kernel
  // limit, which one (e.g. "inotify_init1: Too many open files (limits: sysctl
  // fs.inotify.max_user_instances, and the process's open files)"). Empty while armed.
  const std::string& failure() const { return failure_; }

 private:
  struct Hub;  // the shared instance (path_watch.cc)

  // Gives up this PathWatch's watches (a later arm() starts afresh); `why` becomes failure().
  // Called with the hub's lock held.
  State fail(std::string why);

  std::string path_;
  // Written by any thread that reads the hub's events, so guarded by the hub's lock.
  bool armed_ = false;
  bool changed_ = false;
  uint64_t generation_ = 0;  // of the current arm(): which of this watch's entries are current
  std::vector<int> wds_;     // the kernel watches this one has entries on
  std::chrono::steady_clock::time_point retryAt_{};
  std::string failure_;
};

}  // namespace sandgate::broker
