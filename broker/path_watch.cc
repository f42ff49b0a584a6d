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

PathWatch::PathWatch(std::string path) : path_(std::move(path)) {}

PathWatch::~PathWatch() {
  if (fd_ >= 0) ::close(fd_);
}

bool PathWatch::drain(bool& ok) {
  ok = true;
  bool relevant = false;
  alignas(inotify_event) char buf[4096];
  while (true) {
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {
      if (n == 0) errno = EIO;  // not something inotify does: report it as an I/O error
      ok = false;
      return true;
    }
    for (ssize_t off = 0; off + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      if (ev->mask & IN_Q_OVERFLOW) {
        relevant = true;  // events were lost
        continue;
      }
      auto it = watches_.find(ev->wd);
      if (it == watches_.end()) continue;  // a watch removed by arm()
      // The file's own watch; a directory's own change (no name: chmod, removal, move); a
      // watch the kernel dropped (IN_IGNORED: its inode is gone).
      if (it->second.all || ev->len == 0 || (ev->mask & IN_IGNORED)) {
        relevant = true;
        continue;
      }
      const std::string_view name(ev->name, ::strnlen(ev->name, ev->len));
      const auto& names = it->second.names;
      if (std::find(names.begin(), names.end(), name) != names.end()) relevant = true;
    }
  }
  return relevant;
}

PathWatch::State PathWatch::arm() {
  armed_ = false;
  const auto now = std::chrono::steady_clock::now();
  if (now < retryAt_) return State::kUnavailable;
  retryAt_ = now + kRetryAfter;  // cleared below on success
  if (fd_ < 0) {
    fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd_ < 0) return fail(callFailed("inotify_init1", {}, errno));
  }
  bool ok = true;
  drain(ok);
  if (!ok) return fail(callFailed("read from inotify", {}, errno));

  std::vector<Step> steps;
  const std::string file = resolve(path_, steps);
  std::map<int, Watch> placed;
  for (const auto& s : steps) {
    int wd = ::inotify_add_watch(fd_, s.dir.c_str(), kDirectoryEvents);
    if (wd < 0) return fail(callFailed("inotify_add_watch", s.dir, errno));
    placed[wd].names.push_back(s.name);
  }
  struct stat st {};
  if (!file.empty() && ::stat(file.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    int wd = ::inotify_add_watch(fd_, file.c_str(), kFileEvents);
    if (wd < 0) return fail(callFailed("inotify_add_watch", file, errno));
    placed[wd].all = true;
  }
  for (const auto& [wd, w] : watches_) {
    if (!placed.contains(wd)) ::inotify_rm_watch(fd_, wd);
  }
  watches_ = std::move(placed);
  armed_ = true;
  retryAt_ = {};
  failure_.clear();
  return State::kQuiet;
}

PathWatch::State PathWatch::fail(std::string why) {
  failure_ = std::move(why);
  // Closing the instance drops every watch it holds, placed or half placed.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  watches_.clear();
  armed_ = false;
  return State::kUnavailable;
}

PathWatch::State PathWatch::poll() {
  if (!armed_) return State::kUnavailable;
  bool ok = true;
  const bool relevant = drain(ok);
  if (!ok) return fail(callFailed("read from inotify", {}, errno));
  return relevant ? State::kChanged : State::kQuiet;
}

}  // namespace sandgate::broker
