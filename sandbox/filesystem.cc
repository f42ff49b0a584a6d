// Planning (launcher) and building (sandbox) the mount tree, the nsjail/bubblewrap way: a
// staging tmpfs becomes the root, the host root is bound recursively into it and every mount
// remounted read-only, private and hidden mounts go on top, then pivot_root and detach the rest.
#include "sandbox/filesystem.h"

#include <fcntl.h>
#include <linux/mount.h>
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
#include <map>
#include <set>

#include "common/safe_open.h"
#include "sandbox/environment.h"
#include "sandbox/mount_ops.h"
#include "sandbox/paths.h"
#include "sandbox/resolv_conf.h"
#include "sandbox/run_files.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

int depth(const std::string& path) {
  return path == "/" ? 0 : static_cast<int>(std::count(path.begin(), path.end(), '/'));
}

int kindOrder(MountStep::Kind k) {
  switch (k) {
    case MountStep::Kind::kHideDir:
    case MountStep::Kind::kHideFile:
    case MountStep::Kind::kLeaveOut:  // after the bind of the same directory
      return 1;
    case MountStep::Kind::kWorkspace:
      return 2;  // an explicitly requested workspace wins over a hidden path at the same place
    default:
      return 0;
  }
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
  mountTmpfs(dev + "/shm", MS_NOSUID | MS_NODEV,
             ("mode=1777,size=" + std::to_string(plan.tmpfsBytes)).c_str(), "mount /dev/shm");
  if (plan.devPts) {
    checkSys(mkdir((dev + "/pts").c_str(), 0755), "create /dev/pts", "mkdir");
    if (mount("devpts", (dev + "/pts").c_str(), "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=620") != 0) {
      warnings->push_back(sysFailure("mount /dev/pts (no pseudo-terminals)", "mount", errno));
    }
  }
}

// Binds the host directory `path` at `target` after opening it again without following any
// link and checking that it is the directory the launcher checked (`dev`, `ino`); the bind goes
// through that descriptor, so a link planted on the way after the check cannot redirect it.
void bindChecked(const std::string& path, dev_t dev, ino_t ino, const std::string& target,
                 const std::string& what) {
  const std::string source = kOld + path;
  int fd = safe_open::openNoSymlinks(source, O_PATH | O_DIRECTORY);
  if (fd < 0) throwSys(what, "openat2 (no symlinks)");
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_dev != dev || st.st_ino != ino) {
    close(fd);
    throw SetupError("sandbox: " + what + ": it is no longer the directory that was checked");
  }
  const std::string via = std::string(kOld) + "/proc/self/fd/" + std::to_string(fd);
  int rc = mount(via.c_str(), target.c_str(), nullptr, MS_BIND, nullptr);
  int err = errno;
  close(fd);
  if (rc != 0) throwSys(what, "mount", err);
}

// Attaches a detached mount (open_tree) the launcher made at `target`, and closes it.
void attachDetached(int fd, const std::string& target, const std::string& what) {
  checkSys(syscall(SYS_move_mount, fd, "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH),
           what, "move_mount");
  close(fd);
}

// Binds the workspace at `target`: root launcher, the detached (idmapped) mount it made from
// the directory it checked; otherwise the directory, checked again (bindChecked).
void attachWorkspace(const FilesystemPlan& plan, const std::string& target) {
  const std::string what = "attach workspace " + plan.workspace;
  if (plan.workspaceFd >= 0) {
    attachDetached(plan.workspaceFd, target, what);
    return;
  }
  bindChecked(plan.workspace, plan.workspaceDev, plan.workspaceIno, target, what);
  int statErr = 0;
  unsigned long flags = lockedFlags(target, &statErr);
  if (statErr != 0) throwSys("workspace " + plan.workspace, "statvfs", statErr);
  // Writable, but never a way to gain privileges: no setuid binaries, no device nodes.
  checkSys(mount(nullptr, target.c_str(), nullptr,
                 MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | flags, nullptr),
           "remount workspace " + plan.workspace + " nosuid,nodev", "mount");
}

// Overlay mode: the workspace (as attachWorkspace attaches it) at /lower and the layers'
// directory at /layers in the staging root, then an overlay of them at `target`. The overlay
// takes private clones of its layers, so they stay when the staging root is detached.
void attachOverlay(const FilesystemPlan& plan, const std::string& target, DiskLayer* disk) {
  const std::string lower = "/lower", layers = "/layers";
  checkSys(mkdir(lower.c_str(), 0755), "create the overlay's lower mount point", "mkdir");
  checkSys(mkdir(layers.c_str(), 0755), "create the overlay's layers mount point", "mkdir");
  attachWorkspace(plan, lower);
  std::string lowers = lower;
  if (!plan.earlier.empty()) {
    const std::string earlier = "/earlier";
    checkSys(mkdir(earlier.c_str(), 0755), "create the earlier run's layer mount point", "mkdir");
    const std::string what = "attach the earlier run's layer " + plan.earlier;
    if (plan.earlierFd >= 0) {
      attachDetached(plan.earlierFd, earlier, what);
    } else {
      bindChecked(plan.earlier, plan.earlierDev, plan.earlierIno, earlier, what);
    }
    lowers = earlier + ":" + lower;  // the first is the top: the earlier run's files win
  }
  const std::string what = "attach the overlay's upper layer " + plan.layers;
  if (plan.layersFd >= 0) {
    attachDetached(plan.layersFd, layers, what);
  } else {
    bindChecked(plan.layers, plan.layersDev, plan.layersIno, layers, what);
  }
  std::string upper = layers + "/upper", work = layers + "/work";
  if (plan.diskBytes > 0) {
    // --disk: the upper layer on a tmpfs of that size, copied to layers/upper after the run.
    struct stat st {};
    checkSys(stat(upper.c_str(), &st), "read the upper layer's mode", "stat");
    checkSys(mkdir("/disk", 0755), "create the disk limit's mount point", "mkdir");
    mountTmpfs("/disk", MS_NOSUID | MS_NODEV,
               ("mode=0755,size=" + std::to_string(plan.diskBytes)).c_str(),
               "mount the workspace's sized upper layer (--disk)");
    checkSys(mkdir("/disk/upper", st.st_mode & 0777), "create the sized upper layer", "mkdir");
    checkSys(chmod("/disk/upper", st.st_mode & 0777), "set the sized upper layer's mode", "chmod");
    checkSys(mkdir("/disk/work", 0700), "create the sized work directory", "mkdir");
    if (disk != nullptr) {
      disk->upper = checkSys(open("/disk/upper", O_RDONLY | O_DIRECTORY | O_CLOEXEC),
                             "open the sized upper layer", "open");
      disk->target = checkSys(open(upper.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC),
                              "open the run's upper layer", "open");
      disk->maxBytes = plan.diskBytes;
    }
    upper = "/disk/upper";
    work = "/disk/work";
  }
  // userxattr: mounted in a user namespace, the overlay keeps its metadata (opaque directories)
  // in user.overlay.* xattrs. redirect_dir nofollow (userxattr needs it) and metacopy off: every change in the upper layer is
  // a whole file or a whiteout, which is what the change list reads after the run.
  const std::string data = "lowerdir=" + lowers + ",upperdir=" + upper + ",workdir=" + work +
                           ",userxattr,redirect_dir=nofollow,metacopy=off";
  checkSys(mount("overlay", target.c_str(), "overlay", MS_NOSUID | MS_NODEV, data.c_str()),
           "mount the workspace overlay (" + data + ")", "mount");
}

}  // namespace

const std::vector<std::string>& systemDirectories() {
  static const std::vector<std::string> dirs = {"/usr",   "/bin",   "/sbin",   "/lib",
                                                "/lib32", "/lib64", "/libx32", "/etc"};
  return dirs;
}

const std::vector<std::string>& emptyDirectories() {
  static const std::vector<std::string> dirs = {"/var", "/srv", "/home", "/mnt",  "/media",
                                                "/opt", "/nix", "/snap", "/root", "/boot"};
  return dirs;
}

const std::vector<std::string>& etcSecrets() {
  static const std::vector<std::string> names = {"shadow",
                                                 "shadow-",
                                                 "gshadow",
                                                 "gshadow-",
                                                 "sudoers",
                                                 "sudoers.d",
                                                 "ssh",
                                                 "ssl/private",
                                                 "pki/tls/private",
                                                 "krb5.keytab",
                                                 "kubernetes",
                                                 "rancher",
                                                 "docker",
                                                 "wireguard",
                                                 "NetworkManager/system-connections",
                                                 "letsencrypt",
                                                 "libvirt",
                                                 "netplan",
                                                 "security/opasswd",
                                                 "credstore",
                                                 "credstore.encrypted",
                                                 "sandgate"};
  return names;
}

HiddenPath hidingPathFor(const std::string& file) {
  auto parentOf = [](const std::string& p) {
    auto slash = p.rfind('/');
    return slash == 0 || slash == std::string::npos ? std::string("/") : p.substr(0, slash);
  };
  std::string dir = parentOf(file);
  // Kubernetes projects a Secret as name -> ..data/name, ..data -> ..<timestamp>: the volume's
  // root is the directory above those.
  for (int i = 0; i < 2 && dir != "/"; ++i) {
    if (dir.compare(dir.rfind('/') + 1, 2, "..") != 0) break;
    dir = parentOf(dir);
  }
  const auto& system = systemDirectories();
  if (dir == "/" || std::find(system.begin(), system.end(), dir) != system.end()) {
    return {file, false};
  }
  return {dir, true};
}

FilesystemPlan planFilesystem(const Options& options, const std::string& workspace,
                              std::vector<std::string>* warnings) {
  FilesystemPlan plan;
  plan.workspace = workspace;
  plan.home = options.home;
  plan.devPts = options.devPts;
  plan.tmpfsBytes = options.tmpfsBytes;
  plan.diskBytes = options.diskBytes.value_or(0);
  plan.caBundle = buildCaBundle(options);
  plan.caSystemTarget = resolvePath(kSystemCaBundle);
  using K = MountStep::Kind;
  std::vector<std::string> shown;  // host trees the view shows: hidden paths matter only there
  for (const auto& dir : systemDirectories()) {
    struct stat st {};
    if (lstat(dir.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char link[PATH_MAX];
      ssize_t n = readlink(dir.c_str(), link, sizeof link - 1);
      if (n <= 0) continue;
      plan.steps.push_back({K::kSymlink, dir, std::string(link, static_cast<size_t>(n))});
    } else if (S_ISDIR(st.st_mode)) {
      plan.steps.push_back({K::kReadOnly, dir});
      shown.push_back(dir);
    }
  }
  for (const auto& dir : emptyDirectories()) plan.steps.push_back({K::kEmptyDir, dir});
  // /run is private as a whole, not only /run/secrets and the docker socket: most host sockets
  // (dbus, nscd, systemd-resolved, containerd, sandgate's admin sockets) live there.
  plan.steps.push_back({K::kTmpfs, "/tmp"});
  plan.steps.push_back({K::kTmpfs, "/run"});
  plan.steps.push_back({K::kDev, "/dev"});
  plan.steps.push_back({K::kProc, "/proc"});
  plan.steps.push_back({K::kSys, "/sys"});
  auto isShown = [&](const std::string& p) {
    for (const auto& s : shown) {
      if (isUnder(p, s)) return true;
    }
    return isUnder(p, workspace);
  };
  for (const auto& p : options.readOnlyPaths) {
    std::string r = resolvePath(p);
    if (r.empty() || r == "/" || isShown(r)) continue;  // checked by run(); visible already
    plan.steps.push_back({K::kReadOnly, r});
    shown.push_back(r);
  }

  std::set<std::string> seen;
  auto hide = [&](const std::string& path) {
    // Only where the view shows the host's tree (a read-only path under /tmp included: it is
    // bound over the private /tmp, and what it holds must be hidden there too).
    if (!isShown(path) || !seen.insert(path).second) return;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) return;
    plan.steps.push_back({S_ISDIR(st.st_mode) ? K::kHideDir : K::kHideFile, path});
  };
  // The config's secrets are left out of the directory that holds them (rebuilt without them)
  // rather than covered where they are: a mount over a secret names it in /proc/self/mountinfo,
  // telling the workload where sandgate keeps its keys. /etc's own secrets (etcSecrets) have
  // names everybody knows, and stay covered, as empty files and directories.
  std::map<std::string, std::set<std::string>> leaveOut;  // directory → names
  // True when `path` is left out; false when it is covered (or not shown).
  auto leaveOutOrHide = [&](const std::string& path) {
    // Covered already as one of /etc's own (/etc/sandgate): a name everybody knows, and /etc
    // need not be rebuilt for it.
    if (seen.count(path) != 0) return true;
    const auto slash = path.rfind('/');
    const std::string parent = slash == 0 ? "/" : path.substr(0, slash);
    // Not in a workspace: the run writes there, and a rebuilt directory is read-only.
    if (parent == "/" || !isShown(path) || !isShown(parent) || isUnder(parent, workspace)) {
      hide(path);
      return false;
    }
    struct stat st {};
    if (lstat(path.c_str(), &st) == 0) leaveOut[parent].insert(path.substr(slash + 1));
    return true;
  };
  for (const auto& name : etcSecrets()) hide("/etc/" + name);
  for (const auto& p : options.hiddenPaths) {
    // Both the path as configured (its directory resolved) and where its links lead.
    std::vector<std::string> forms;
    auto slash = p.rfind('/');
    if (slash != std::string::npos) {
      std::string dir = resolvePath(slash == 0 ? "/" : p.substr(0, slash));
      if (!dir.empty()) forms.push_back((dir == "/" ? "" : dir) + p.substr(slash));
    }
    if (std::string r = resolvePath(p); !r.empty()) forms.push_back(r);
    for (const auto& f : forms) {
      struct stat st {};
      if (stat(f.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        leaveOutOrHide(f);  // a directory of secrets: itself
        continue;
      }
      HiddenPath h = hidingPathFor(f);
      // Left out of a rebuilt directory, even a file renamed over it later stays out: the
      // rebuilt directory holds the names it had when the sandbox started.
      if (leaveOutOrHide(h.path)) continue;
      if (!h.whole && isShown(f) && warnings != nullptr) {
        warnings->push_back("secret " + f + " lies directly in " +
                            h.path.substr(0, h.path.rfind('/') + 1) +
                            ": only the file itself is hidden, so a replacement renamed over it "
                            "would be visible to a running sandbox; keep secrets in a directory "
                            "of their own");
      }
    }
  }
  // A directory that is hidden or left out already stays so: rebuilding it to leave out a
  // secret further down would show what else it holds.
  std::vector<std::string> gone(seen.begin(), seen.end());
  for (const auto& [dir, names] : leaveOut) {
    for (const auto& n : names) gone.push_back(dir + "/" + n);
  }
  for (auto& [dir, names] : leaveOut) {
    bool inside = std::any_of(gone.begin(), gone.end(),
                              [&, d = dir](const std::string& g) { return isUnder(d, g); });
    if (!inside) plan.steps.push_back({K::kLeaveOut, dir, "", {names.begin(), names.end()}});
  }
  plan.steps.push_back({K::kWorkspace, workspace});
  std::stable_sort(plan.steps.begin(), plan.steps.end(), [](const auto& a, const auto& b) {
    int da = depth(a.path), db = depth(b.path);
    if (da != db) return da < db;
    return kindOrder(a.kind) < kindOrder(b.kind);
  });
  return plan;
}

void buildFilesystem(const FilesystemPlan& plan, std::vector<std::string>* warnings,
                     DiskLayer* disk) {
  // Nothing below may propagate back to the host's mount namespace.
  checkSys(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), "make mounts private",
           "mount");
  // Staging root: this tmpfs covers the host's /tmp only inside our mount namespace; after the
  // pivot the host's tree is still reachable under /oldroot (the sources of every bind).
  mountTmpfs("/tmp", MS_NOSUID | MS_NODEV, "mode=0755", "mount staging tmpfs");
  checkSys(mkdir("/tmp/newroot", 0755), "create staging newroot", "mkdir");
  checkSys(mkdir("/tmp/oldroot", 0755), "create staging oldroot", "mkdir");
  checkSys(syscall(SYS_pivot_root, "/tmp", "/tmp/oldroot"), "pivot_root into staging",
           "pivot_root");
  checkSys(chdir("/"), "enter staging root", "chdir");
  // The new root: an empty tmpfs that only gets mount points, links and empty directories, and
  // is read-only before the command starts.
  mountTmpfs(kNew, MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096", "mount the root");

  const std::string tmpfsData = "size=" + std::to_string(plan.tmpfsBytes);
  std::vector<std::string> readOnlyLater;
  for (const auto& step : plan.steps) {
    const std::string target = kNew + step.path;
    struct stat st {};
    bool exists = lstat(target.c_str(), &st) == 0;
    using K = MountStep::Kind;
    K kind = step.kind;
    if (kind == K::kHideDir || kind == K::kHideFile) {
      if (!exists) continue;  // not in the view: nothing to hide
      kind = S_ISDIR(st.st_mode) ? K::kHideDir : K::kHideFile;
    }
    switch (kind) {
      case K::kReadOnly: {
        const std::string source = kOld + step.path;
        struct stat src {};
        if (stat(source.c_str(), &src) != 0) break;  // gone since it was planned
        if (!exists) {
          mkdirs(target.substr(0, target.rfind('/')), 0755);
          if (S_ISDIR(src.st_mode)) {
            checkSys(mkdir(target.c_str(), 0755), "create " + step.path, "mkdir");
          } else {
            int fd = checkSys(open(target.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444),
                              "create " + step.path, "open");
            close(fd);
          }
        }
        checkSys(mount(source.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr),
                 "bind " + step.path + " read-only", "mount");
        remountTreeReadOnly(target);
        break;
      }
      case K::kSymlink:
        if (!exists) {
          checkSys(symlink(step.target.c_str(), target.c_str()), "link " + step.path, "symlink");
        }
        break;
      case K::kEmptyDir:
        if (!exists) mkdirs(target, 0755);
        break;
      case K::kTmpfs:
        if (!exists) mkdirs(target, 0755);
        mountTmpfs(target, MS_NOSUID | MS_NODEV,
                   ((step.path == "/tmp" ? "mode=1777," : "mode=0755,") + tmpfsData).c_str(),
                   "mount " + step.path);
        break;
      case K::kDev:
        if (!exists) mkdirs(target, 0755);
        buildDev(target, plan, warnings);
        break;
      case K::kProc:
        if (!exists) mkdirs(target, 0755);
        checkSys(mount("proc", target.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr),
                 "mount /proc", "mount");
        break;
      case K::kSys:
        if (!exists) mkdirs(target, 0755);
        // A sysfs of the sandbox's own network namespace: /sys/class/net holds only its lo, and
        // no cgroup tree (the host's shows every other run's memory use) is mounted on it.
        if (mount("sysfs", target.c_str(), "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  nullptr) != 0) {
          warnings->push_back(
              sysFailure("mount a sysfs for the sandbox (/sys stays empty)", "mount", errno));
        }
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
      case K::kLeaveOut:
        if (exists && S_ISDIR(st.st_mode)) {
          buildWithout(step.path, step.leaveOut, plan.uid, plan.gid, warnings);
        }
        break;
      case K::kWorkspace:
        if (!exists) mkdirs(target, 0755);
        if (plan.overlay) {
          attachOverlay(plan, target, disk);
        } else {
          attachWorkspace(plan, target);
        }
        break;
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
  if (!safe_open::writeAll(fd, plan.caBundle)) {
    int err = errno;
    close(fd);
    throwSys("write CA bundle", "write", err);
  }
  close(fd);
  if (!plan.caSystemTarget.empty()) {
    std::string target = kNew + plan.caSystemTarget;
    struct stat st {};
    if (stat(target.c_str(), &st) == 0) {
      checkSys(mount(bundle.c_str(), target.c_str(), nullptr, MS_BIND, nullptr),
               "bind CA bundle over " + plan.caSystemTarget, "mount");
      checkSys(mount(nullptr, target.c_str(), nullptr,
                     MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr),
               "remount CA bundle read-only", "mount");
    }
  }
  installResolvConf(kNew, plan, warnings);
  const std::string home = kNew + plan.home;
  mkdirs(home, 0700);
  installRunFiles(kNew, plan, warnings);
  // Nothing more is created in the root: no top-level file or directory for the workload.
  checkSys(mount(nullptr, kNew, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                 nullptr),
           "make the root read-only", "mount");

  // Enter the new root and detach everything else, the staging root with the host tree under
  // /oldroot included: from here on the host is reachable only through the read-only binds.
  checkSys(chdir(kNew), "enter new root", "chdir");
  checkSys(syscall(SYS_pivot_root, ".", "."), "pivot_root into the new root", "pivot_root");
  checkSys(umount2(".", MNT_DETACH), "detach the old root", "umount2");
  checkSys(chdir("/"), "enter /", "chdir");
}

}  // namespace sandgate::sandbox
