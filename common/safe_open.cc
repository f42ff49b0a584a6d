// Opening files without following links (see safe_open.h).
#include "common/safe_open.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

namespace sandgate::safe_open {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {

// Set once openat2 answered ENOSYS: every later call walks instead of asking again.
std::atomic<bool> gNoOpenat2{false};

bool creates(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

// openat2, retried on EAGAIN (a concurrent rename under RESOLVE_BENEATH) and EINTR. ENOSYS is
// passed to the caller, who walks instead.
int callOpenat2(int dir, const std::string& path, int flags, mode_t mode, uint64_t resolve) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = creates(flags) ? mode : 0;  // openat2 refuses a mode it would not use
  how.resolve = resolve;
  for (int attempt = 0;; ++attempt) {
    long fd = ::syscall(SYS_openat2, dir, path.c_str(), &how, sizeof how);
    if (fd >= 0) return static_cast<int>(fd);
    if (errno == EINTR || (errno == EAGAIN && attempt < 8)) continue;
    return -1;
  }
}

std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string c = path.substr(i, j - i);
    if (!c.empty() && c != ".") out.push_back(std::move(c));
    i = j + 1;
  }
  return out;
}

// ELOOP where `name` in `dir` is a link, otherwise `err` unchanged: O_NOFOLLOW reports a link
// as ENOTDIR when O_DIRECTORY is asked too, and the caller must learn it met a link.
int linkOr(int dir, const std::string& name, int err) {
  struct stat st {};
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
    return ELOOP;
  }
  return err;
}

// The fallback: one component at a time, each relative to the descriptor of the directory
// before it and opened O_NOFOLLOW. `beneath`: the walk starts at `anchor` and may not leave it
// (absolute paths and `..` above it are EXDEV); otherwise an absolute path starts at `/` and a
// relative one at `anchor`.
int walk(int anchor, const std::string& path, int flags, mode_t mode, bool beneath) {
  if (path.empty()) {
    errno = ENOENT;
    return -1;
  }
  const bool absolute = path[0] == '/';
  if (absolute && beneath) {
    errno = EXDEV;
    return -1;
  }
  std::vector<std::string> parts = components(path);
  // Directories on the way; back() is where the next component is looked up. The first is
  // the starting point (not owned when it is the caller's anchor).
  std::vector<UniqueFd> stack;
  auto openDir = [](int at, const char* name) {
    return UniqueFd(::openat(at, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  };
  UniqueFd start = absolute ? openDir(AT_FDCWD, "/") : openDir(anchor, ".");
  if (!start.valid()) return -1;
  stack.push_back(std::move(start));
  if (parts.empty()) {
    // "/", "." or "a/..": the starting directory itself.
    return ::openat(stack.back().get(), ".", flags | O_CLOEXEC, mode);
  }
  const bool trailingSlash = path.back() == '/';
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& c = parts[i];
    if (c == "..") {
      if (beneath && stack.size() == 1) {
        errno = EXDEV;
        return -1;
      }
      if (stack.size() > 1) {
        stack.pop_back();
        continue;
      }
      // Above the starting point of a path that may leave it: the real parent.
    }
    UniqueFd next = openDir(stack.back().get(), c.c_str());
    if (!next.valid()) {
      errno = linkOr(stack.back().get(), c, errno);
      return -1;
    }
    if (c == "..") {
      stack.back() = std::move(next);  // the bottom of the stack moves up
    } else {
      stack.push_back(std::move(next));
    }
  }
  const std::string& last = parts.back();
  int dir = stack.back().get();
  if (last == "..") {
    if (beneath && stack.size() == 1) {
      errno = EXDEV;
      return -1;
    }
    if (stack.size() > 1) {
      stack.pop_back();
      return ::openat(stack.back().get(), ".", flags | O_CLOEXEC, mode);
    }
  }
  int finalFlags = flags | O_NOFOLLOW | O_CLOEXEC | (trailingSlash ? O_DIRECTORY : 0);
  int fd = ::openat(dir, last.c_str(), finalFlags, mode);
  if (fd < 0) {
    errno = linkOr(dir, last, errno);
    return -1;
  }
  if (flags & O_PATH) {
    // O_PATH|O_NOFOLLOW opens a link itself instead of refusing it.
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
      ::close(fd);
      errno = ELOOP;
      return -1;
    }
  }
  return fd;
}

int openWith(int anchor, const std::string& path, int flags, mode_t mode, bool beneath,
             Method method) {
  if (method == Method::kAuto && !gNoOpenat2.load(std::memory_order_relaxed)) {
    uint64_t resolve = RESOLVE_NO_SYMLINKS | (beneath ? RESOLVE_BENEATH : 0);
    int fd = callOpenat2(anchor, path, flags, mode, resolve);
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return fd;
    // ENOSYS: a kernel before 5.6. EPERM: maybe a container's seccomp profile that refuses
    // syscalls it does not know; the walk gives the real answer (the same EPERM otherwise).
    if (errno == ENOSYS) gNoOpenat2.store(true, std::memory_order_relaxed);
  }
  return walk(anchor, path, flags, mode, beneath);
}

std::string randomSuffix() {
  unsigned char raw[6] = {};
  if (::getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) {
    // Unpredictable is not needed for safety (O_EXCL is): this only avoids collisions.
    auto n = static_cast<uint64_t>(::getpid()) ^ static_cast<uint64_t>(::time(nullptr));
    std::memcpy(raw, &n, sizeof raw);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
  return out;
}

}  // namespace

int openNoSymlinks(const std::string& path, int flags, mode_t mode, Method method) {
  return openWith(AT_FDCWD, path, flags, mode, false, method);
}

int openBeneath(int dir, const std::string& path, int flags, mode_t mode, Method method) {
  return openWith(dir, path, flags, mode, true, method);
}

std::optional<Parent> openParent(const std::string& path, Method method) {
  std::string dirPath, name;
  size_t end = path.find_last_not_of('/');
  if (end == std::string::npos) {
    errno = path.empty() ? ENOENT : EISDIR;  // "" or "/"
    return std::nullopt;
  }
  size_t slash = path.rfind('/', end);
  name = path.substr(slash == std::string::npos ? 0 : slash + 1,
                     slash == std::string::npos ? end + 1 : end - slash);
  if (name == "." || name == "..") {
    errno = EISDIR;
    return std::nullopt;
  }
  if (slash == std::string::npos) {
    dirPath = ".";
  } else if (slash == 0) {
    dirPath = "/";
  } else {
    dirPath = path.substr(0, slash);
  }
  UniqueFd dir(openNoSymlinks(dirPath, O_PATH | O_DIRECTORY, 0, method));
  if (!dir.valid()) return std::nullopt;
  return Parent{std::move(dir), std::move(name)};
}

std::optional<std::string> replaceFile(const std::string& path, std::string_view data,
                                       mode_t mode) {
  auto failure = [&](const char* what, int err) {
    return "cannot " + std::string(what) + " " + path + ": " + describeError(err);
  };
  auto parent = openParent(path);
  if (!parent) return failure("open the directory of", errno);
  const int dir = parent->dir.get();
  std::string tmp;
  UniqueFd fd;
  for (int attempt = 0; attempt < 4 && !fd.valid(); ++attempt) {
    tmp = "." + parent->name + ".tmp-" + randomSuffix();
    fd.reset(
        ::openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!fd.valid() && errno != EEXIST) break;
  }
  if (!fd.valid()) return failure("create a temporary file for", errno);
  std::optional<std::string> err;
  // The umask may have removed bits: the file gets exactly `mode`.
  if (::fchmod(fd.get(), mode) != 0) err = failure("set the mode of", errno);
  if (!err && !writeAll(fd.get(), data)) err = failure("write", errno);
  if (!err && ::fsync(fd.get()) != 0) err = failure("sync", errno);
  fd.reset();
  // renameat replaces the name, whatever it is (a link included), and never follows it.
  if (!err && ::renameat(dir, tmp.c_str(), dir, parent->name.c_str()) != 0) {
    err = failure("replace", errno);
  }
  if (err) ::unlinkat(dir, tmp.c_str(), 0);
  return err;
}

bool writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

int isWithin(int fd, dev_t dev, ino_t ino) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return -1;
  UniqueFd current;
  int at = fd;
  // Bounded: PATH_MAX allows at most 2048 levels of one-character names.
  for (int depth = 0; depth < 4096; ++depth) {
    if (st.st_dev == dev && st.st_ino == ino) return 1;
    UniqueFd up(::openat(at, "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!up.valid()) return -1;
    struct stat parent {};
    if (::fstat(up.get(), &parent) != 0) return -1;
    if (parent.st_dev == st.st_dev && parent.st_ino == st.st_ino) return 0;  // the root
    current = std::move(up);
    at = current.get();
    st = parent;
  }
  errno = ELOOP;
  return -1;
}

std::string describeError(int err) {
  if (err == ELOOP) {
    return "a component of the path is a symbolic link (sandgate does not follow links in "
           "paths it writes to; give the real path)";
  }
  return std::strerror(err);
}

}  // namespace sandgate::safe_open
