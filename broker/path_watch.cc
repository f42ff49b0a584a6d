// PathWatch: inotify watches on a path's file and on every directory entry that leads to it
// (see path_watch.h).
#include "broker/path_watch.h"

#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

namespace sandgate::broker {

namespace {

namespace fs = std::filesystem;

// A directory on the way: its entry for the next step created, removed, renamed in or out or
// re-permissioned; the directory itself re-permissioned, removed or moved.
constexpr uint32_t kDirectoryEvents = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                      IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;
// The file: its contents or attributes changed, or it went away.
constexpr uint32_t kFileEvents =
    IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_DONT_FOLLOW;
// As the kernel's own limit on links followed in one lookup.
constexpr int kMaxLinks = 40;
constexpr auto kRetryAfter = std::chrono::seconds(1);

// A failed inotify call, for failure(): the kernel limits behind EMFILE and ENOSPC are named,
// since "No space left on device" for a watch says nothing about disks.
std::string callFailed(const char* call, const std::string& path, int err) {
  std::string why = call;
  if (!path.empty()) why += " " + path;
  why += ": ";
  why += std::strerror(err);
  if (err == EMFILE) {
    why += " (limits: sysctl fs.inotify.max_user_instances, and the process's open files)";
  } else if (err == ENOSPC) {
    why += " (limit: sysctl fs.inotify.max_user_watches)";
  }
  return why;
}

// One directory entry the lookup passes through: `name` in directory `dir`.
struct Step {
  std::string dir;
  std::string name;
};

// Puts the names of `path` (no root, no empty names) in front of `todo`, in order.
void prependNames(const fs::path& path, std::deque<fs::path>& todo) {
  std::vector<fs::path> names;
  for (const auto& part : path.relative_path()) {
    if (!part.empty()) names.push_back(part);
  }
  todo.insert(todo.begin(), names.begin(), names.end());
}

// Walks `path` as a lookup does, following symbolic links, and lists every entry it passes.
// Returns the resolved path of what it names, or empty when a step is missing (its directory's
// watch sees it appear) or the links go round.
std::string resolve(const std::string& path, std::vector<Step>& steps) {
  std::error_code ec;
  fs::path done = fs::path(path).is_absolute() ? fs::path("/") : fs::current_path(ec);
  if (ec) return {};
  std::deque<fs::path> todo;
  prependNames(path, todo);
  int links = 0;
  while (!todo.empty()) {
    const fs::path name = std::move(todo.front());
    todo.pop_front();
    if (name == ".") continue;
    if (name == "..") {
      done = done.parent_path();
      continue;
    }
    fs::path next = done / name;
    steps.push_back({done.string(), name.string()});
    struct stat st {};
    if (::lstat(next.c_str(), &st) != 0) return {};
    if (!S_ISLNK(st.st_mode)) {
      done = std::move(next);
      continue;
    }
    if (++links > kMaxLinks) return {};
    const fs::path target = fs::read_symlink(next, ec);
    if (ec || target.empty()) return {};
    if (target.is_absolute()) done = "/";
    prependNames(target, todo);
  }
  return done.string();
}

}  // namespace

// The process's one inotify instance and, for each of its kernel watches, the PathWatches with
// an entry on it. Everything here, and the PathWatch fields it writes, is guarded by `mu`.
struct PathWatch::Hub {
  struct Entry {
    PathWatch* owner;
    uint64_t generation;             // the owner's arm() that placed it
    bool all = false;                // the file's own watch: every event counts
    std::vector<std::string> names;  // a directory's: only these entries count
  };

  static Hub& get() {
    static Hub* hub = new Hub;  // never destroyed: a PathWatch may outlive static destruction
    return *hub;
  }

  // Opens the instance if none is open; false (errno set) if the kernel refuses.
  bool open() {
    if (fd < 0) fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    return fd >= 0;
  }

  // Reads what is queued and marks the PathWatches each event concerns as changed. A read
  // error gives up the instance: every PathWatch on it is then unarmed and says why.
  void drain() {
    if (fd < 0) return;
    alignas(inotify_event) char buf[4096];
    while (true) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {
        if (n == 0) errno = EIO;  // not something inotify does: report it as an I/O error
        const std::string why = callFailed("read from inotify", {}, errno);
        for (auto& [wd, list] : entries) {
          for (auto& e : list) {
            e.owner->armed_ = false;
            e.owner->failure_ = why;
          }
        }
        entries.clear();
        ::close(fd);
        fd = -1;
        return;
      }
      for (ssize_t off = 0; off + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
        const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
        off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
        dispatch(*ev);
      }
    }
  }

  void dispatch(const inotify_event& ev) {
    if (ev.mask & IN_Q_OVERFLOW) {  // events were lost: anyone may have missed one
      for (auto& [wd, list] : entries) {
        for (auto& e : list) e.owner->changed_ = true;
      }
      return;
    }
    auto it = entries.find(ev.wd);
    if (it == entries.end()) return;  // a watch no one needs any more
    const std::string_view name(ev.name, ::strnlen(ev.name, ev.len));
    for (auto& e : it->second) {
      // The file's own watch; a directory's own change (no name: chmod, removal, move); a
      // watch the kernel dropped (IN_IGNORED: its inode is gone).
      if (e.all || ev.len == 0 || (ev.mask & IN_IGNORED) ||
          std::find(e.names.begin(), e.names.end(), name) != e.names.end()) {
        e.owner->changed_ = true;
      }
    }
    if (ev.mask & IN_IGNORED) entries.erase(it);  // the kernel has let go of it
  }

  // Adds `owner`'s entry for `dir`'s entry `name` (empty: the file itself). False (errno set)
  // if the kernel refuses the watch.
  bool add(PathWatch& owner, const std::string& path, const std::string& name, bool file) {
    const int wd = ::inotify_add_watch(fd, path.c_str(), file ? kFileEvents : kDirectoryEvents);
    if (wd < 0) return false;
    auto& list = entries[wd];
    for (auto& e : list) {
      // A second name in a directory already on the way (the file is added once per arm()).
      if (e.owner == &owner && e.generation == owner.generation_) {
        e.names.push_back(name);
        return true;
      }
    }
    Entry e{&owner, owner.generation_, file, {}};
    if (!name.empty()) e.names.push_back(name);
    list.push_back(std::move(e));
    if (std::find(owner.wds_.begin(), owner.wds_.end(), wd) == owner.wds_.end()) {
      owner.wds_.push_back(wd);
    }
    return true;
  }

  // Drops `owner`'s entries other than those of its current arm() (all of them if `all`); a
  // kernel watch left without entries is removed, and the instance once no watch is left.
  void release(PathWatch& owner, bool all) {
    std::vector<int> kept;
    for (int wd : owner.wds_) {
      auto it = entries.find(wd);
      if (it == entries.end()) continue;  // dropped by the kernel (IN_IGNORED)
      auto& list = it->second;
      std::erase_if(list, [&](const Entry& e) {
        return e.owner == &owner && (all || e.generation != owner.generation_);
      });
      const bool mine =
          std::any_of(list.begin(), list.end(), [&](const Entry& e) { return e.owner == &owner; });
      if (mine) kept.push_back(wd);
      if (list.empty()) {
        ::inotify_rm_watch(fd, wd);
        entries.erase(it);
      }
    }
    owner.wds_ = std::move(kept);
    if (entries.empty() && fd >= 0) {
      ::close(fd);
      fd = -1;
    }
  }

  std::mutex mu;
  int fd = -1;
  std::map<int, std::vector<Entry>> entries;  // by watch descriptor
};

PathWatch::PathWatch(std::string path) : path_(std::move(path)) {}

PathWatch::~PathWatch() {
  Hub& hub = Hub::get();
  std::lock_guard lock(hub.mu);
  hub.release(*this, true);
}

PathWatch::State PathWatch::arm() {
  Hub& hub = Hub::get();
  std::lock_guard lock(hub.mu);
  armed_ = false;
  const auto now = std::chrono::steady_clock::now();
  if (now < retryAt_) return State::kUnavailable;
  retryAt_ = now + kRetryAfter;  // cleared below on success
  hub.drain();                   // what happened so far is for the others
  if (!hub.open()) return fail(callFailed("inotify_init1", {}, errno));

  // The new entries first, then the old ones go: a watch both need is never removed between.
  ++generation_;
  std::vector<Step> steps;
  const std::string file = resolve(path_, steps);
  for (const auto& s : steps) {
    if (!hub.add(*this, s.dir, s.name, false)) {
      return fail(callFailed("inotify_add_watch", s.dir, errno));
    }
  }
  struct stat st {};
  if (!file.empty() && ::stat(file.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    if (!hub.add(*this, file, {}, true)) return fail(callFailed("inotify_add_watch", file, errno));
  }
  hub.release(*this, false);
  armed_ = true;
  changed_ = false;
  retryAt_ = {};
  failure_.clear();
  return State::kQuiet;
}

PathWatch::State PathWatch::fail(std::string why) {
  failure_ = std::move(why);
  Hub::get().release(*this, true);  // placed or half placed
  armed_ = false;
  return State::kUnavailable;
}

PathWatch::State PathWatch::poll() {
  Hub& hub = Hub::get();
  std::lock_guard lock(hub.mu);
  if (!armed_) return State::kUnavailable;
  hub.drain();
  if (!armed_) return State::kUnavailable;  // the instance failed while reading
  return changed_ ? State::kChanged : State::kQuiet;
}

}  // namespace sandgate::broker
