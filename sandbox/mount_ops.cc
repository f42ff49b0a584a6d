// Mount operations of the sandbox's side of the view (see mount_ops.h).
#include "sandbox/mount_ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <fstream>

#include "sandbox/paths.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

std::string unescapeMountPath(const std::string& s) {
  // mountinfo escapes space, tab, newline and backslash as \ooo (octal).
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
      continue;
    }
    out += s[i];
  }
  return out;
}

}  // namespace

unsigned long lockedFlags(const std::string& path, int* err) {
  struct statvfs sv {};
  if (statvfs(path.c_str(), &sv) != 0) {
    *err = errno;
    return 0;
  }
  *err = 0;
  unsigned long flags = 0;
  if (sv.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (sv.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
#ifdef ST_NOSYMFOLLOW
  if (sv.f_flag & ST_NOSYMFOLLOW) flags |= MS_NOSYMFOLLOW;
#endif
  return flags;
}

void mkdirs(const std::string& path, mode_t mode) {
  std::string cur;
  size_t pos = 1;
  for (int i = 0; i < 4096 && pos <= path.size(); ++i) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    cur = path.substr(0, next);
    if (mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) throwSys("create " + cur, "mkdir");
    pos = next + 1;
  }
}

void remountTreeReadOnly(const std::string& top) {
  std::ifstream in(std::string(kOld) + "/proc/self/mountinfo");
  if (!in) throwSys("read mount table", "open");
  std::vector<std::string> points;
  std::string line;
  for (int i = 0; i < 100000 && std::getline(in, line); ++i) {
    // id parent major:minor root mountpoint ...
    size_t p = 0;
    for (int field = 0; field < 4 && p != std::string::npos; ++field) p = line.find(' ', p + 1);
    if (p == std::string::npos) continue;
    size_t e = line.find(' ', p + 1);
    std::string mp = unescapeMountPath(line.substr(p + 1, e - p - 1));
    if (isUnder(mp, top)) points.push_back(mp);
  }
  for (const auto& mp : points) {
    int err = 0;
    unsigned long flags = lockedFlags(mp, &err);
    // A mount the sandbox's uid cannot reach (EACCES) cannot be reached from inside either.
    if (err == EACCES || err == ENOENT) continue;
    if (err != 0) throwSys("remount " + mp.substr(8) + " read-only", "statvfs", err);
    if (mount(nullptr, mp.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, nullptr) !=
        0) {
      if (errno == EACCES) continue;
      throwSys("remount " + (mp == kNew ? std::string("/") : mp.substr(8)) + " read-only", "mount");
    }
  }
}

void mountTmpfs(const std::string& target, unsigned long flags, const char* data,
                const std::string& step) {
  checkSys(mount("tmpfs", target.c_str(), "tmpfs", flags, data), step, "mount");
}

void buildWithout(const std::string& path, const std::vector<std::string>& names, uid_t uid,
                  gid_t gid, std::vector<std::string>* warnings) {
  const std::string target = kNew + path;
  const std::string source = kOld + path;
  struct stat st {};
  if (stat(source.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;  // gone since planned
  // The tmpfs belongs to the sandbox's uid: it gets the access that uid had to the host's
  // directory, for every class (owner, group, others are all the sandbox), so that a directory
  // it could not enter stays closed.
  const mode_t m = st.st_mode;
  const mode_t bits = st.st_uid == uid ? (m >> 6) & 7 : st.st_gid == gid ? (m >> 3) & 7 : m & 7;
  DIR* dir = opendir(source.c_str());
  int listErr = dir == nullptr ? errno : 0;
  mountTmpfs(target, MS_NOSUID | MS_NODEV, "mode=0755,size=64k", "leave secrets out of " + path);
  if (dir == nullptr) {
    warnings->push_back(sysFailure("list " + path + " to leave its secrets out (it is left empty)",
                                   "opendir", listErr));
  }
  for (int i = 0; dir != nullptr && i < 65536; ++i) {
    errno = 0;
    dirent* e = readdir(dir);
    if (e == nullptr) break;
    const std::string name = e->d_name;
    if (name == "." || name == ".." || std::find(names.begin(), names.end(), name) != names.end()) {
      continue;
    }
    const std::string from = source + "/" + name, to = target + "/" + name;
    struct stat es {};
    if (lstat(from.c_str(), &es) != 0) continue;
    if (S_ISLNK(es.st_mode)) {
      char link[PATH_MAX];
      ssize_t n = readlink(from.c_str(), link, sizeof link - 1);
      if (n > 0) {
        link[n] = '\0';
        checkSys(symlink(link, to.c_str()), "link " + path + "/" + name, "symlink");
      }
      continue;
    }
    if (S_ISDIR(es.st_mode)) {
      checkSys(mkdir(to.c_str(), 0755), "create " + path + "/" + name, "mkdir");
    } else {
      int fd = checkSys(open(to.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444),
                        "create " + path + "/" + name, "open");
      close(fd);
    }
    checkSys(mount(from.c_str(), to.c_str(), nullptr, MS_BIND | MS_REC, nullptr),
             "bind " + path + "/" + name + " read-only", "mount");
  }
  if (dir != nullptr) closedir(dir);
  // The directory's mode last: it may not let even its owner write.
  checkSys(chmod(target.c_str(), bits * 0111), "leave secrets out of " + path, "chmod");
  remountTreeReadOnly(target);
}

}  // namespace sandgate::sandbox
