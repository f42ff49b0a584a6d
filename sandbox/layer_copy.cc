// Copying a finished run's upper layer out of its tmpfs (see layer_copy.h).
#include "sandbox/layer_copy.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "sandbox/paths.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

constexpr int kMaxDepth = 256;

// One copy's settings: what to count (copyTree), and whether the source may be touched. A
// finished run's upper layer is the launcher's to fix modes on; the workspace never is.
struct Copy {
  CopyStats* stats = nullptr;
  bool sourceReadOnly = false;
};

// The overlay's own xattrs (opaque, origin, impure): what makes the copy read as the layer.
void copyOverlayXattrs(int from, int to) {
  char names[4096];
  ssize_t n = flistxattr(from, names, sizeof names);
  for (ssize_t i = 0; n > 0 && i < n; i += static_cast<ssize_t>(strlen(names + i)) + 1) {
    const char* name = names + i;
    if (strncmp(name, "user.overlay.", 13) != 0) continue;
    char value[4096];
    ssize_t len = fgetxattr(from, name, value, sizeof value);
    if (len >= 0) (void)fsetxattr(to, name, value, static_cast<size_t>(len), 0);
  }
}

// The content of `in` into the empty `out`: a reflink where the filesystem shares extents
// (btrfs, XFS: no data copied), else copy_file_range (in the kernel), else read and write.
std::string copyContent(int in, int out, const char* name, CopyStats* stats) {
  if (ioctl(out, FICLONE, in) == 0) {
    if (stats != nullptr) ++stats->reflinked;
    return "";
  }
  for (;;) {
    ssize_t n = copy_file_range(in, nullptr, out, nullptr, size_t{1} << 30, 0);
    if (n == 0) return "";
    if (n > 0 || errno == EINTR) continue;
    // Across filesystems, or one without it: read and write from where it stopped.
    if (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS) break;
    return sysFailure(std::string("copy ") + name, "copy_file_range", errno);
  }
  char buf[65536];
  for (;;) {
    ssize_t n = read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysFailure(std::string("copy the upper layer: read ") + name, "read", errno);
    if (n == 0) return "";
    for (ssize_t done = 0; done < n;) {
      ssize_t w = write(out, buf + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        return sysFailure(std::string("copy the upper layer: write ") + name, "write", errno);
      done += w;
    }
  }
}

std::string copyFile(int fromDir, int toDir, const char* name, const struct stat& st,
                     const Copy& c) {
  CopyStats* stats = c.stats;
  int in = openat(fromDir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (in < 0 && errno == EACCES && !c.sourceReadOnly) {
    // The owner may always add its own read bit; the copy gets the mode the workload left.
    (void)fchmodat(fromDir, name, (st.st_mode & 07777) | S_IRUSR, 0);
    in = openat(fromDir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  }
  if (in < 0) return sysFailure(std::string("copy the upper layer: open ") + name, "openat", errno);
  int out = openat(toDir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) {
    int err = errno;
    close(in);
    return sysFailure(std::string("copy the upper layer: create ") + name, "openat", err);
  }
  std::string error = copyContent(in, out, name, stats);
  if (stats != nullptr && error.empty()) {
    ++stats->files;
    stats->bytes += static_cast<uint64_t>(st.st_size);
  }
  if (error.empty()) {
    copyOverlayXattrs(in, out);
    if (fchmod(out, st.st_mode & 07777) != 0)
      error = sysFailure("copy the upper layer", "fchmod", errno);
  }
  close(in);
  close(out);
  return error;
}

std::string copyDir(int from, int to, int depth, const Copy& c);

std::string copyEntry(int from, int to, const char* name, int depth, const Copy& c) {
  struct stat st {};
  if (fstatat(from, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return "";  // gone meanwhile
  std::string error;
  if (S_ISREG(st.st_mode)) {
    error = copyFile(from, to, name, st, c);
  } else if (S_ISDIR(st.st_mode)) {
    int sub = openat(from, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    bool unreadable =
        (sub < 0 && errno == EACCES) || (sub >= 0 && faccessat(sub, ".", R_OK | X_OK, 0) != 0);
    if (unreadable && !c.sourceReadOnly) {
      // The owner may make its own directory readable; the copy gets the original mode.
      if (sub >= 0) close(sub);
      (void)fchmodat(from, name, (st.st_mode & 07777) | S_IRWXU, 0);
      sub = openat(from, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (sub < 0)
      return sysFailure(std::string("copy the upper layer: open ") + name, "openat", errno);
    if (mkdirat(to, name, 0700) != 0) {
      close(sub);
      return sysFailure(std::string("copy the upper layer: mkdir ") + name, "mkdirat", errno);
    }
    int dst = openat(to, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dst < 0) {
      close(sub);
      return sysFailure(std::string("copy the upper layer: open ") + name, "openat", errno);
    }
    error = copyDir(sub, dst, depth + 1, c);
    copyOverlayXattrs(sub, dst);
    if (error.empty() && fchmod(dst, st.st_mode & 07777) != 0) {
      error = sysFailure("copy the upper layer", "fchmod", errno);
    }
    close(sub);
    close(dst);
  } else if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t len = readlinkat(from, name, target, sizeof target - 1);
    if (len >= 0) {
      target[len] = '\0';
      if (symlinkat(target, to, name) != 0)
        error = sysFailure("copy the upper layer", "symlinkat", errno);
    }
  } else if (S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0) {
    if (mknodat(to, name, S_IFCHR | 0000, makedev(0, 0)) != 0) {
      error = sysFailure(std::string("copy the upper layer: whiteout ") + name, "mknodat", errno);
    }
  }
  return error;
}

std::string copyDir(int from, int to, int depth, const Copy& c) {
  if (depth > kMaxDepth) return "copy the upper layer: nested deeper than 256 directories";
  std::vector<std::string> names = listDirectory(from);
  for (const auto& n : names) {
    if (auto error = copyEntry(from, to, n.c_str(), depth, c); !error.empty()) return error;
  }
  return "";
}

std::string chownDir(int dir, uid_t uid, gid_t gid, int depth) {
  if (depth > kMaxDepth) return "give the copy away: nested deeper than 256 directories";
  if (fchown(dir, uid, gid) != 0) return sysFailure("give the copy away", "fchown", errno);
  for (const auto& n : listDirectory(dir)) {
    struct stat st {};
    if (fstatat(dir, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      int sub = openat(dir, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) return sysFailure("give the copy away: open " + n, "openat", errno);
      std::string error = chownDir(sub, uid, gid, depth + 1);
      close(sub);
      if (!error.empty()) return error;
    } else if (fchownat(dir, n.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return sysFailure("give the copy away: " + n, "fchownat", errno);
    }
  }
  return "";
}

}  // namespace

std::string copyUpperLayer(int from, int to) { return copyDir(from, to, 0, Copy{}); }

std::string copyTree(int from, int to, uid_t uid, gid_t gid, CopyStats* stats) {
  // Root reads every file; where it cannot (root squashed by NFS) the copy fails, and says so.
  if (auto error = copyDir(from, to, 0, Copy{stats, true}); !error.empty()) return error;
  return chownDir(to, uid, gid, 0);
}

std::string copyLayerEntry(int fromDir, int toDir, const std::string& name) {
  return copyEntry(fromDir, toDir, name.c_str(), 0, Copy{});
}

std::string removeLayerEntry(int dir, const std::string& name) {
  struct stat st {};
  if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return "";
  if (S_ISDIR(st.st_mode)) {
    int sub = openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) return sysFailure("remove " + name, "openat", errno);
    (void)fchmod(sub, 0700);
    std::vector<std::string> names = listDirectory(sub);
    std::string error;
    for (const auto& n : names) {
      if (error.empty()) error = removeLayerEntry(sub, n);
    }
    close(sub);
    if (!error.empty()) return error;
    if (unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0)
      return sysFailure("remove " + name, "unlinkat", errno);
    return "";
  }
  if (unlinkat(dir, name.c_str(), 0) != 0) return sysFailure("remove " + name, "unlinkat", errno);
  return "";
}

}  // namespace sandgate::sandbox
