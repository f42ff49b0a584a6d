// Copying a run's upper layer out of its tmpfs, and from one run's layer to the next (see
// layer_copy.h).
#include "sandbox/layer_copy.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/safe_open.h"
#include "sandbox/paths.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

constexpr int kMaxDepth = 256;

// A copy is never setuid or setgid: it would be a program any local user runs as its owner
// (root, for a copy a root launcher makes). A directory keeps setgid (group inheritance, no
// privilege), which the workspace copy must show as it is.
mode_t fileMode(mode_t m) { return m & 01777; }
mode_t dirMode(mode_t m) { return m & 03777; }

// The overlay's own xattrs (opaque, origin, impure): what makes the copy read as the layer.
// Nothing else: security.capability (file capabilities) is never copied.
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

// Bytes [off, off + len) of `in` to the same offset of `out`: copy_file_range (in the kernel),
// else pread and pwrite.
std::string copyRange(int in, int out, off_t off, off_t len, const char* name) {
  bool kernel = true;
  char buf[65536];
  while (len > 0) {
    if (kernel) {
      loff_t i = off, o = off;
      ssize_t n = copy_file_range(in, &i, out, &o, static_cast<size_t>(len), 0);
      if (n > 0) {
        off += n;
        len -= n;
        continue;
      }
      if (n == 0) return "";  // the file ended early
      if (errno == EINTR) continue;
      // Across filesystems, or one without it: read and write from where it stopped.
      if (errno != EXDEV && errno != EINVAL && errno != EOPNOTSUPP && errno != ENOSYS)
        return sysFailure(std::string("copy ") + name, "copy_file_range", errno);
      kernel = false;
    }
    ssize_t n = pread(in, buf, std::min<off_t>(len, sizeof buf), off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysFailure(std::string("copy a layer: read ") + name, "pread", errno);
    if (n == 0) return "";
    for (ssize_t done = 0; done < n;) {
      ssize_t w = pwrite(out, buf + done, static_cast<size_t>(n - done), off + done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return sysFailure(std::string("copy a layer: write ") + name, "pwrite", errno);
      done += w;
    }
    off += n;
    len -= n;
  }
  return "";
}

// The content of `in` (`size` bytes) into the empty `out`: a reflink where the filesystem
// shares extents (btrfs, XFS: no data copied), else its data segments only (SEEK_DATA,
// SEEK_HOLE) and the size: a hole stays a hole, so a sparse file the workload made costs the
// host no more than it cost the layer.
std::string copyContent(int in, int out, off_t size, const char* name, bool* reflinked) {
  if (ioctl(out, FICLONE, in) == 0) {
    *reflinked = true;
    return "";
  }
  for (off_t pos = 0; pos < size;) {
    off_t data = lseek(in, pos, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // only a hole is left
    off_t hole = size;
    if (data < 0) {
      data = pos;  // a filesystem without SEEK_DATA: the rest is data
    } else if (off_t h = lseek(in, data, SEEK_HOLE); h >= 0) {
      hole = std::min(h, size);
    }
    if (data >= hole) break;
    if (auto e = copyRange(in, out, data, hole - data, name); !e.empty()) return e;
    pos = hole;
  }
  if (ftruncate(out, size) != 0) return sysFailure(std::string("copy ") + name, "ftruncate", errno);
  return "";
}

}  // namespace

// A second name `name` in `toDir` for the copy's file `rel`, whose directory is opened beneath
// the copy with no link followed: whatever a layer put in the tree since, the link is to that
// file and nothing outside. False: make a copy instead.
bool LayerCopier::linkTo(const std::string& rel, int toDir, const char* name) {
  size_t slash = rel.rfind('/');
  safe_open::UniqueFd parent(
      slash == std::string::npos
          ? ::fcntl(to_, F_DUPFD_CLOEXEC, 0)
          : safe_open::openBeneath(to_, rel.substr(0, slash), O_PATH | O_DIRECTORY));
  if (!parent.valid()) return false;
  const std::string base = slash == std::string::npos ? rel : rel.substr(slash + 1);
  return linkat(parent.get(), base.c_str(), toDir, name, 0) == 0;
}

void LayerCopier::own(int dirFd, const char* name, int fd) {
  if (options_.uid == static_cast<uid_t>(-1)) return;
  // Before any fchmod: the mode set after is the one the copy keeps.
  if (fd >= 0) {
    (void)fchown(fd, options_.uid, options_.gid);
  } else {
    (void)fchownat(dirFd, name, options_.uid, options_.gid, AT_SYMLINK_NOFOLLOW);
  }
}

std::string LayerCopier::file(int fromDir, int toDir, const std::string& rel, const char* name,
                              const struct stat& st) {
  const std::pair<dev_t, ino_t> key{st.st_dev, st.st_ino};
  if (st.st_nlink > 1) {
    // A second name of a file already copied is a second name of the copy, never more bytes.
    auto it = linked_.find(key);
    if (it != linked_.end() && linkTo(it->second, toDir, name)) {
      ++outcome_.links;
      return "";
    }
  }
  const uint64_t cost = static_cast<uint64_t>(st.st_blocks) * 512;
  if (options_.maxBytes > 0 && outcome_.bytes + cost > options_.maxBytes) {
    // --disk promised the host no more than this: the file is left out, and said.
    if (outcome_.notCopied.size() < LayerCopyOutcome::kMaxNamed) outcome_.notCopied.push_back(rel);
    ++outcome_.notCopiedCount;
    outcome_.notCopiedBytes += cost;
    return "";
  }
  int in = openat(fromDir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (in < 0 && errno == EACCES && !sourceReadOnly_) {
    // The owner may always add its own read bit; the copy gets the mode the workload left.
    (void)fchmodat(fromDir, name, (st.st_mode & 07777) | S_IRUSR, 0);
    in = openat(fromDir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  }
  if (in < 0) return sysFailure("copy a layer: open " + rel, "openat", errno);
  int out = openat(toDir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) {
    int err = errno;
    close(in);
    return sysFailure("copy a layer: create " + rel, "openat", err);
  }
  bool reflinked = false;
  std::string error = copyContent(in, out, st.st_size, rel.c_str(), &reflinked);
  if (error.empty()) {
    ++outcome_.files;
    outcome_.bytes += cost;
    if (stats_ != nullptr) {
      ++stats_->files;
      stats_->bytes += static_cast<uint64_t>(st.st_size);
      if (reflinked) ++stats_->reflinked;
    }
    copyOverlayXattrs(in, out);
    own(toDir, name, out);
    if (fchmod(out, fileMode(st.st_mode)) != 0) error = sysFailure("copy a layer", "fchmod", errno);
  }
  if (error.empty() && st.st_nlink > 1) linked_.emplace(key, rel);
  close(in);
  close(out);
  return error;
}

std::string LayerCopier::entry(int from, int to, const std::string& relDir, const char* name,
                               int depth) {
  struct stat st {};
  if (fstatat(from, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return "";  // gone meanwhile
  const std::string rel = relDir + name;
  std::string error;
  if (S_ISREG(st.st_mode)) {
    error = file(from, to, rel, name, st);
  } else if (S_ISDIR(st.st_mode)) {
    int sub = openat(from, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    bool unreadable =
        (sub < 0 && errno == EACCES) || (sub >= 0 && faccessat(sub, ".", R_OK | X_OK, 0) != 0);
    if (unreadable && !sourceReadOnly_) {
      // The owner may make its own directory readable; the copy gets the original mode.
      if (sub >= 0) close(sub);
      (void)fchmodat(from, name, (st.st_mode & 07777) | S_IRWXU, 0);
      sub = openat(from, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (sub < 0) return sysFailure("copy a layer: open " + rel, "openat", errno);
    if (mkdirat(to, name, 0700) != 0) {
      close(sub);
      return sysFailure("copy a layer: mkdir " + rel, "mkdirat", errno);
    }
    int dst = openat(to, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dst < 0) {
      close(sub);
      return sysFailure("copy a layer: open " + rel, "openat", errno);
    }
    error = dir(sub, dst, rel + "/", depth + 1);
    copyOverlayXattrs(sub, dst);
    own(to, name, dst);
    if (error.empty() && fchmod(dst, dirMode(st.st_mode)) != 0) {
      error = sysFailure("copy a layer", "fchmod", errno);
    }
    close(sub);
    close(dst);
  } else if (S_ISLNK(st.st_mode)) {
    // A link is made again as a link, its target as text: never followed.
    char target[4096];
    ssize_t len = readlinkat(from, name, target, sizeof target - 1);
    if (len >= 0) {
      target[len] = '\0';
      if (symlinkat(target, to, name) != 0) return sysFailure("copy a layer", "symlinkat", errno);
      own(to, name, -1);
    }
  } else if (S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0) {
    if (mknodat(to, name, S_IFCHR | 0000, makedev(0, 0)) != 0) {
      return sysFailure("copy a layer: whiteout " + rel, "mknodat", errno);
    }
    own(to, name, -1);
  } else if (S_ISFIFO(st.st_mode)) {
    // A FIFO holds no data: made again, so that a later run and the review see it.
    if (mkfifoat(to, name, 0600) != 0)
      return sysFailure("copy a layer: fifo " + rel, "mkfifoat", errno);
    own(to, name, -1);
    if (fchmodat(to, name, fileMode(st.st_mode), 0) != 0) {
      return sysFailure("copy a layer: fifo " + rel, "fchmodat", errno);
    }
  }
  return error;
}

std::string LayerCopier::dir(int from, int to, const std::string& rel, int depth) {
  if (depth > kMaxDepth) return "copy a layer: nested deeper than 256 directories";
  for (const auto& n : listDirectory(from)) {
    if (auto error = entry(from, to, rel, n.c_str(), depth); !error.empty()) return error;
  }
  return "";
}

std::string LayerCopier::copyAll(int from, int toDir, const std::string& toRel) {
  return dir(from, toDir, toRel, 0);
}

std::string LayerCopier::copyEntry(int fromDir, int toDir, const std::string& toRel,
                                   const std::string& name) {
  return entry(fromDir, toDir, toRel, name.c_str(), 0);
}

std::string copyUpperLayer(int from, int to, const LayerCopyOptions& options,
                           LayerCopyOutcome* outcome) {
  LayerCopier copier(to, options);
  std::string error = copier.copyAll(from, to);
  if (outcome != nullptr) *outcome = copier.outcome();
  return error;
}

std::string copyTree(int from, int to, uid_t uid, gid_t gid, CopyStats* stats) {
  LayerCopier copier(to, LayerCopyOptions{uid, gid, 0});
  copier.countInto(stats);
  // Root reads every file; where it cannot (root squashed by NFS) the copy fails, and says so.
  copier.sourceReadOnly();
  if (auto error = copier.copyAll(from, to); !error.empty()) return error;
  if (fchown(to, uid, gid) != 0) return sysFailure("give the copy away", "fchown", errno);
  return "";
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
