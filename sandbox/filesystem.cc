// Planning (launcher) and building (sandbox) the mount tree, the nsjail/bubblewrap way: a
// staging tmpfs becomes the root, the host root is bound recursively into it and every mount
// remounted read-only, private and hidden mounts go on top, then pivot_root and detach the rest.
#include "sandbox/filesystem.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

#include "sandbox/environment.h"
#include "sandbox/resolv_conf.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

constexpr const char* kNew = "/newroot";
constexpr const char* kOld = "/oldroot";

bool under(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

int depth(const std::string& path) {
  return path == "/" ? 0 : static_cast<int>(std::count(path.begin(), path.end(), '/'));
}

int kindOrder(MountStep::Kind k) {
  switch (k) {
    case MountStep::Kind::kHideDir:
    case MountStep::Kind::kHideFile:
      return 1;
    case MountStep::Kind::kWorkspace:
      return 2;  // an explicitly requested workspace wins over a hidden path at the same place
    default:
      return 0;
  }
}

std::vector<std::string> passwdHomes() {
  std::vector<std::string> homes;
  FILE* f = std::fopen("/etc/passwd", "re");
  if (f == nullptr) return homes;
  passwd pw{};
  passwd* found = nullptr;
  char buf[4096];
  for (int i = 0; i < 100000 && fgetpwent_r(f, &pw, buf, sizeof buf, &found) == 0; ++i) {
    if (found->pw_dir != nullptr && found->pw_dir[0] == '/') homes.emplace_back(found->pw_dir);
  }
  std::fclose(f);
  return homes;
}

std::string resolve(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return {};
  return buf;
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

// The flags a bind remount must carry over: in a user namespace the kernel locks nosuid, nodev,
// noexec and the atime flags of mounts inherited from the host, and a remount that would clear
// them fails with EPERM.
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

// Every mount at or under /newroot becomes read-only (a recursive bind alone keeps each submount
// writable, and MS_REC|MS_RDONLY is ignored on a bind: each one needs its own remount).
void remountTreeReadOnly() {
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
    if (under(mp, kNew)) points.push_back(mp);
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

void buildDev(const std::string& dev, const FilesystemPlan& plan,
              std::vector<std::string>* warnings) {
  mountTmpfs(dev, MS_NOSUID | MS_NOEXEC, "mode=0755", "mount /dev");
  // Bind the host's nodes: a user namespace cannot mknod, and these few are all a build needs.
  for (const char* name : {"null", "zero", "full", "random", "urandom", "tty"}) {
    std::string src = std::string(kOld) + "/dev/" + name;
    std::string dst = dev + "/" + name;
    struct stat st {};
    if (lstat(src.c_str(), &st) != 0) {
      warnings->push_back(std::string("/dev/") + name + " is missing on the host");
      continue;
    }
    int fd = checkSys(open(dst.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666),
                      "create /dev/" + std::string(name), "open");
    close(fd);
    checkSys(mount(src.c_str(), dst.c_str(), nullptr, MS_BIND, nullptr),
             "bind /dev/" + std::string(name), "mount");
  }
  const std::pair<const char*, const char*> links[] = {{"fd", "/proc/self/fd"},
                                                       {"stdin", "/proc/self/fd/0"},
                                                       {"stdout", "/proc/self/fd/1"},
                                                       {"stderr", "/proc/self/fd/2"},
                                                       {"ptmx", "pts/ptmx"}};
  for (const auto& [name, target] : links) {
    checkSys(symlink(target, (dev + "/" + name).c_str()), "link /dev/" + std::string(name),
             "symlink");
  }
  checkSys(mkdir((dev + "/shm").c_str(), 01777), "create /dev/shm", "mkdir");
  mountTmpfs(dev + "/shm", MS_NOSUID | MS_NODEV, "mode=1777", "mount /dev/shm");
  if (plan.devPts) {
    checkSys(mkdir((dev + "/pts").c_str(), 0755), "create /dev/pts", "mkdir");
    if (mount("devpts", (dev + "/pts").c_str(), "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=620") != 0) {
      warnings->push_back(sysFailure("mount /dev/pts (no pseudo-terminals)", "mount", errno));
    }
  }
}

}  // namespace

const std::vector<std::string>& homeSecretNames() {
  static const std::vector<std::string> names = {
      ".ssh",   ".aws",   ".config/gcloud", ".docker", ".kube", ".netrc", ".git-credentials",
      ".gnupg", ".azure", ".config/gh",     ".pypirc", ".npmrc"};
  return names;
}

FilesystemPlan planFilesystem(const Options& options, const std::string& workspace) {
  FilesystemPlan plan;
  plan.workspace = workspace;
  plan.home = options.home;
  plan.devPts = options.devPts;
  plan.caBundle = buildCaBundle(options);
  plan.caSystemTarget = resolve(kSystemCaBundle);
  using K = MountStep::Kind;
  // /run is replaced as a whole, not only /run/secrets and /var/run/docker.sock: Unix sockets
  // stay connectable on a read-only bind (dbus, nscd and systemd-resolved would answer DNS,
  // docker and containerd would start containers), and most of them live in /run.
  plan.steps = {{K::kTmpfs, "/tmp"}, {K::kTmpfs, "/run"}, {K::kDev, "/dev"}, {K::kProc, "/proc"}};

  std::vector<std::string> candidates = {"/root", "/run/secrets", "/var/run/docker.sock"};
  for (const auto& home : passwdHomes()) {
    for (const auto& name : homeSecretNames()) candidates.push_back(home + "/" + name);
  }
  for (const auto& p : options.hiddenPaths) candidates.push_back(p);
  std::set<std::string> seen;
  for (const auto& c : candidates) {
    std::string r = resolve(c);
    if (r.empty() || r == "/" || !seen.insert(r).second) continue;
    bool replaced = false;
    for (const char* dir : {"/tmp", "/run", "/dev", "/proc"}) replaced |= under(r, dir);
    if (replaced && !under(r, workspace)) continue;
    struct stat st {};
    if (stat(r.c_str(), &st) != 0) continue;
    plan.steps.push_back({S_ISDIR(st.st_mode) ? K::kHideDir : K::kHideFile, r});
  }
  plan.steps.push_back({K::kWorkspace, workspace});
  std::stable_sort(plan.steps.begin(), plan.steps.end(), [](const auto& a, const auto& b) {
    int da = depth(a.path), db = depth(b.path);
    if (da != db) return da < db;
    return kindOrder(a.kind) < kindOrder(b.kind);
  });
  return plan;
}

void buildFilesystem(const FilesystemPlan& plan, std::vector<std::string>* warnings) {
  // Nothing below may propagate back to the host's mount namespace.
  checkSys(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), "make mounts private",
           "mount");
  // Staging root: this tmpfs covers the host's /tmp only inside our mount namespace; after the
  // pivot the host's /tmp is still reachable under /oldroot (for a workspace in /tmp).
  mountTmpfs("/tmp", MS_NOSUID | MS_NODEV, "mode=0755", "mount staging tmpfs");
  checkSys(mkdir("/tmp/newroot", 0755), "create staging newroot", "mkdir");
  checkSys(mkdir("/tmp/oldroot", 0755), "create staging oldroot", "mkdir");
  checkSys(syscall(SYS_pivot_root, "/tmp", "/tmp/oldroot"), "pivot_root into staging",
           "pivot_root");
  checkSys(chdir("/"), "enter staging root", "chdir");
  checkSys(mount(kOld, kNew, nullptr, MS_BIND | MS_REC, nullptr), "bind host root", "mount");
  remountTreeReadOnly();

  std::vector<std::string> readOnlyLater;
  for (const auto& step : plan.steps) {
    const std::string target = kNew + step.path;
    struct stat st {};
    bool exists = lstat(target.c_str(), &st) == 0;
    using K = MountStep::Kind;
    K kind = step.kind;
    if (kind == K::kHideDir || kind == K::kHideFile) {
      if (!exists) continue;  // under a private tmpfs already: nothing to hide
      kind = S_ISDIR(st.st_mode) ? K::kHideDir : K::kHideFile;
    }
    switch (kind) {
      case K::kTmpfs:
        mountTmpfs(target, MS_NOSUID | MS_NODEV, step.path == "/tmp" ? "mode=1777" : "mode=0755",
                   "mount " + step.path);
        break;
      case K::kDev:
        buildDev(target, plan, warnings);
        break;
      case K::kProc:
        checkSys(mount("proc", target.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr),
                 "mount /proc", "mount");
        break;
      case K::kHideDir:
        // Writable until every step is done (a workspace may need a mount point inside).
        mountTmpfs(target, MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=16k",
                   "hide " + step.path);
        readOnlyLater.push_back(target);
        break;
      case K::kHideFile:
        checkSys(mount("/oldroot/dev/null", target.c_str(), nullptr, MS_BIND, nullptr),
                 "hide " + step.path, "mount");
        break;
      case K::kWorkspace: {
        if (!exists) mkdirs(target, 0755);
        std::string source = kOld + step.path;
        checkSys(mount(source.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr),
                 "bind workspace " + step.path, "mount");
        int err = 0;
        unsigned long flags = lockedFlags(target, &err);
        if (err != 0) throwSys("workspace " + step.path, "statvfs", err);
        // Writable, but never a way to gain privileges: no setuid binaries, no device nodes.
        checkSys(mount(nullptr, target.c_str(), nullptr,
                       MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | flags, nullptr),
                 "remount workspace " + step.path + " nosuid,nodev", "mount");
        break;
      }
    }
  }
  for (const auto& t : readOnlyLater) {
    checkSys(mount(nullptr, t.c_str(), nullptr,
                   MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k"),
             "make hidden " + t.substr(8) + " read-only", "mount");
  }

  // The CA bundle: read-only for the command, and also over the system bundle path.
  const std::string dir = std::string(kNew) + "/run/sandgate";
  checkSys(mkdir(dir.c_str(), 0755), "create /run/sandgate", "mkdir");
  const std::string bundle = std::string(kNew) + kCaBundlePath;
  int fd = checkSys(open(bundle.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444),
                    "create CA bundle", "open");
  size_t off = 0;
  while (off < plan.caBundle.size()) {
    ssize_t n = write(fd, plan.caBundle.data() + off, plan.caBundle.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      close(fd);
      throwSys("write CA bundle", "write", err);
    }
    off += static_cast<size_t>(n);
  }
  close(fd);
  if (!plan.caSystemTarget.empty()) {
    std::string target = kNew + plan.caSystemTarget;
    checkSys(mount(bundle.c_str(), target.c_str(), nullptr, MS_BIND, nullptr),
             "bind CA bundle over " + plan.caSystemTarget, "mount");
    checkSys(mount(nullptr, target.c_str(), nullptr,
                   MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr),
             "remount CA bundle read-only", "mount");
  }
  installResolvConf(kNew, plan, warnings);
  const std::string home = kNew + plan.home;
  mkdirs(home, 0700);

  // Enter the new root and detach everything else, the staging root with the host tree under
  // /oldroot included: from here on the host is reachable only through the read-only binds.
  checkSys(chdir(kNew), "enter new root", "chdir");
  checkSys(syscall(SYS_pivot_root, ".", "."), "pivot_root into the new root", "pivot_root");
  checkSys(umount2(".", MNT_DETACH), "detach the old root", "umount2");
  checkSys(chdir("/"), "enter /", "chdir");
}

}  // namespace sandgate::sandbox
