// Opening files to write without following a symbolic link in any component of the path: the
// one way the launcher and serve open what they write (--report, audit.path, ca_cert_out, the
// ready file), because a workload can plant links in every directory it may write, and root
// writing through one of them truncates or creates any host file.
//
// openat2(2) with RESOLVE_NO_SYMLINKS does it in one call; where the kernel has no openat2
// (ENOSYS, before Linux 5.6) the path is walked one component at a time with
// O_PATH|O_DIRECTORY|O_NOFOLLOW, each step relative to the descriptor of the one before, so that
// nothing can be swapped in between. Both refuse a link with ELOOP. Functions follow the
// open(2) convention: a descriptor (O_CLOEXEC always added), or -1 with errno set.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace sandgate::safe_open {

// Owns a file descriptor (closed when it goes).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// How links are refused: by openat2 (the default where the kernel has it) or by the
// component walk (forced in tests, so that both paths are covered on any kernel).
enum class Method { kAuto, kWalk };

// Opens `path` (absolute, or relative to the current directory) with open(2)'s `flags` and
// `mode`, following no symbolic link on the way or at the end. `..` is allowed (it is not a
// link). ELOOP: a component is a link.
int openNoSymlinks(const std::string& path, int flags, mode_t mode = 0,
                   Method method = Method::kAuto);

// Opens `path` relative to the directory `dir`, following no link and never leaving `dir`
// (RESOLVE_BENEATH): an absolute path, or `..` above `dir`, fails with EXDEV.
int openBeneath(int dir, const std::string& path, int flags, mode_t mode = 0,
                Method method = Method::kAuto);

// The directory that holds `path`, opened O_PATH|O_DIRECTORY with openNoSymlinks, and the
// last component's name, to create or rename it with the *at() calls. The name is never
// empty, "." or "..": such a path fails with EISDIR.
struct Parent {
  UniqueFd dir;
  std::string name;
};
std::optional<Parent> openParent(const std::string& path, Method method = Method::kAuto);

// Writes `data` to `path`: a new temporary file beside it (O_EXCL, exactly `mode`), synced,
// then renamed over `path`. No component of `path` is followed; a link at `path` itself is
// replaced, never written through. Returns why it failed (naming `path`), or nullopt.
std::optional<std::string> replaceFile(const std::string& path, std::string_view data, mode_t mode);

// Writes all of `data` to `fd`, again after EINTR and short writes. False with errno set (EIO
// for a write that wrote nothing) if it could not.
bool writeAll(int fd, std::string_view data);

// Whether the directory `fd` is the directory (`dev`, `ino`) or lies anywhere below it. Walks
// `..` by descriptor up to the root, so neither a link nor `..` in the path that found `fd`
// can hide it. 1: within, 0: not, -1 with errno: a parent could not be opened.
int isWithin(int fd, dev_t dev, ino_t ino);

// errno of a failed open as a phrase for a message; ELOOP says that a link was refused.
std::string describeError(int err);

}  // namespace sandgate::safe_open
