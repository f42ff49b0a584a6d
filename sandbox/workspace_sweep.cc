// Sweeping a bind run's workspace for setuid/setgid files and file capabilities (see
// workspace_sweep.h).
#include "sandbox/workspace_sweep.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

constexpr int kMaxDepth = 256;
constexpr size_t kMaxListed = 100;
constexpr char kCapability[] = "security.capability";

std::string procPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

class Sweeper {
 public:
  explicit Sweeper(dev_t dev) : dev_(dev) {}
  WorkspaceSweep result;

  void error(const std::string& rel, const std::string& why) {
    if (result.errors.size() < kMaxListed) result.errors.push_back(rel + ": " + why);
  }

  // `dir` is an open directory (owned here); `rel` its path ("" for the workspace itself).
  void walk(int dir, const std::string& rel, int depth) {
    DIR* d = fdopendir(dir);
    if (d == nullptr) {
      error(rel.empty() ? "." : rel, sysFailure("sweep", "fdopendir", errno));
      close(dir);
      return;
    }
    while (dirent* e = readdir(d)) {
      const char* name = e->d_name;
      if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
      const std::string path = rel.empty() ? name : rel + "/" + name;
      struct stat st {};
      if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
      if (st.st_dev != dev_) continue;  // another mount: not the workspace the run had
      if (S_ISREG(st.st_mode)) {
        sweepFile(dirfd(d), name, st, path);
      } else if (S_ISDIR(st.st_mode)) {
        if (depth + 1 >= kMaxDepth) {
          error(path, "deeper than " + std::to_string(kMaxDepth) + " levels: not swept");
          continue;
        }
        int sub = openDirectory(dirfd(d), name, st, path);
        if (sub >= 0) walk(sub, path, depth + 1);
      }
    }
    closedir(d);
  }

 private:
  // O_NOFOLLOW and the inode compared: what is opened is the directory that was looked at.
  int openDirectory(int parent, const char* name, const struct stat& st, const std::string& rel) {
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int fd = openat(parent, name, flags);
    if (fd < 0 && errno == EACCES && st.st_uid == geteuid()) {
      // Rootless: a directory the launcher's user owns but made unreadable (the workload may
      // hide a file that way). Opened O_PATH, given u+rx, read, and its mode put back.
      int path = openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      struct stat now {};
      if (path >= 0 && fstat(path, &now) == 0 && now.st_ino == st.st_ino &&
          chmod(procPath(path).c_str(), (now.st_mode & 07777) | S_IRUSR | S_IXUSR) == 0) {
        fd = openat(path, ".", flags);
        (void)chmod(procPath(path).c_str(), now.st_mode & 07777);
      }
      if (path >= 0) close(path);
    }
    if (fd < 0) {
      error(rel, sysFailure("sweep", "openat", errno));
      return -1;
    }
    struct stat now {};
    if (fstat(fd, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) {
      close(fd);
      error(rel, "changed while it was swept");
      return -1;
    }
    return fd;
  }

  void sweepFile(int parent, const char* name, const struct stat& st, const std::string& rel) {
    // No *at form of getxattr before Linux 6.13: the name through the parent's descriptor,
    // without following a link at the end.
    const std::string viaParent = procPath(parent) + "/" + name;
    bool capability = lgetxattr(viaParent.c_str(), kCapability, nullptr, 0) >= 0;
    bool bits = (st.st_mode & (S_ISUID | S_ISGID)) != 0;
    if (!bits && !capability) return;
    // An O_PATH descriptor of the inode, checked: chmod and removexattr through it act on that
    // inode whatever the name points at by then (and need no read permission).
    int fd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat now {};
    if (fd < 0 || fstat(fd, &now) != 0 || now.st_ino != st.st_ino || !S_ISREG(now.st_mode)) {
      if (fd >= 0) close(fd);
      error(rel, "changed while it was swept");
      return;
    }
    const std::string inode = procPath(fd);
    bool cleared = false;
    if ((now.st_mode & (S_ISUID | S_ISGID)) != 0) {
      if (chmod(inode.c_str(), now.st_mode & 01777) == 0) {
        cleared = true;
      } else {
        error(rel, sysFailure("clear setuid/setgid", "chmod", errno));
      }
    }
    if (capability) {
      if (removexattr(inode.c_str(), kCapability) == 0 || errno == ENODATA) {
        cleared = true;
      } else {
        error(rel, sysFailure("remove " + std::string(kCapability), "removexattr", errno));
      }
    }
    close(fd);
    if (cleared) {
      ++result.cleared;
      if (result.paths.size() < kMaxListed) result.paths.push_back(rel);
    }
  }

  dev_t dev_;
};

// One line for the run's stderr when the sweep cleared or missed something, else "".
std::string describe(const WorkspaceSweep& sweep) {
  std::string line;
  if (sweep.cleared > 0) {
    line = "the workspace sweep cleared setuid/setgid bits or file capabilities on " +
           std::to_string(sweep.cleared) +
           " file(s) the run left in the host's directory (the report's workspace_sweep names "
           "them)";
  }
  if (!sweep.errors.empty()) {
    line += std::string(line.empty() ? "" : "; ") + "the workspace sweep could not check " +
            std::to_string(sweep.errors.size()) +
            " path(s): look for setuid files there before anyone runs them (the report's "
            "workspace_sweep.errors)";
  }
  return line;
}

}  // namespace

WorkspaceSweep sweepWorkspace(int workspaceFd, std::vector<std::string>* warnings) {
  WorkspaceSweep result;
  int dir = openat(workspaceFd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct stat st {};
  if (dir < 0 || fstat(dir, &st) != 0) {
    result.errors.push_back(".: " + sysFailure("sweep the workspace", "openat", errno));
    if (dir >= 0) close(dir);
  } else {
    Sweeper s(st.st_dev);
    s.walk(dir, "", 0);
    result = std::move(s.result);
  }
  if (auto line = describe(result); !line.empty()) {
    spdlog::warn("sandbox: {}", line);
    warnings->push_back(std::move(line));
  }
  return result;
}

}  // namespace sandgate::sandbox
