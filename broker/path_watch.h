// PathWatch: tells a file secret's reader, with one read(2), whether anything that decides what
// a path holds may have changed since it last looked (inotify).
#pragma once

#include <chrono>
#include <map>
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
// Not thread-safe: FileSource calls it under its lock.
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
  // Since arm(): kChanged or kQuiet; kUnavailable when not armed. One read(2) when nothing
  // happened.
  State poll();
  // Why the last attempt to watch failed: the call, the path, the error and, for a kernel
  // limit, which one (e.g. "inotify_init1: Too many open files (limits: sysctl
  // fs.inotify.max_user_instances, and the process's open files)"). Empty while armed.
  const std::string& failure() const { return failure_; }

 private:
  struct Watch {
    bool all = false;                // the file's own watch: every event counts
    std::vector<std::string> names;  // a directory's: only these entries count
  };
  // Reads what is queued; true when any of it concerns the path. `ok` false on a read error.
  bool drain(bool& ok);
  // Gives up the instance and its watches (a later arm() starts afresh); `why` becomes
  // failure().
  State fail(std::string why);

  std::string path_;
  int fd_ = -1;
  bool armed_ = false;
  std::chrono::steady_clock::time_point retryAt_{};
  std::map<int, Watch> watches_;  // by watch descriptor
  std::string failure_;
};

}  // namespace sandgate::broker
