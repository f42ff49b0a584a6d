// Opening, checking and idmapping the workspace (see workspace.h).
#include "sandbox/workspace.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/safe_open.h"
#include "sandbox/identity.h"
#include "sandbox/layer_copy.h"
#include "sandbox/paths.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

// Every home directory the host's user database knows (NSS: LDAP and SSSD users too, where the
// database can be listed), plus the launcher's $HOME and the workspace owner's home.
std::vector<std::string> homeDirectories(uid_t owner) {
  std::vector<std::string> homes = {"/root"};
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/') homes.emplace_back(h);
  passwd pw{};
  passwd* found = nullptr;
  std::array<char, 4096> buf{};
  if (getpwuid_r(owner, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
      found->pw_dir != nullptr) {
    homes.emplace_back(found->pw_dir);
  }
  setpwent();
  for (int i = 0; i < 100000; ++i) {
    if (getpwent_r(&pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) break;
    if (found->pw_dir != nullptr && found->pw_dir[0] == '/' && std::strcmp(found->pw_dir, "/")) {
      homes.emplace_back(found->pw_dir);
    }
  }
  endpwent();
  return homes;
}

// The system directory `p` is or lies directly in, if any (see openWorkspace).
std::optional<std::string> systemDirectoryOf(const std::string& p) {
  static const char* const kSystem[] = {
      "/usr",         "/usr/lib",   "/usr/lib32", "/usr/lib64",     "/usr/libx32",
      "/usr/libexec", "/usr/share", "/usr/local", "/usr/local/lib", "/usr/local/share",
      "/usr/include", "/usr/src",   "/var",       "/var/lib",       "/var/log",
      "/var/spool",   "/var/cache", "/var/mail",  "/var/backups",   "/var/opt",
      "/boot",        "/lib",       "/lib32",     "/lib64",         "/libx32",
      "/bin",         "/sbin",      "/opt",       "/nix",           "/nix/store",
      "/efi"};
  const auto slash = p.rfind('/');
  const std::string parent = slash == 0 ? "/" : p.substr(0, slash);
  for (const char* dir : kSystem) {
    if (p == dir || parent == dir) return std::string(dir);
  }
  return std::nullopt;
}

Diagnostic refuse(const std::string& ws, const std::string& why, const std::string& instead) {
  return diagnostic("sandbox: refusing the workspace " + ws + ": " + why + "; " + instead);
}

}  // namespace

Result<CheckedWorkspace> openWorkspace(const std::string& path,
                                       const std::vector<std::string>& hiddenPaths) {
  std::string ws = path;
  if (ws.empty()) {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == nullptr) {
      return diagnostic(sysFailure("workspace", "getcwd", errno));
    }
    ws = cwd;
  } else if (ws[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == nullptr) {
      return diagnostic(sysFailure("workspace", "getcwd", errno));
    }
    ws = std::string(cwd) + "/" + ws;
  }
  CheckedWorkspace out;
  out.fd = safe_open::openNoSymlinks(ws, O_PATH | O_DIRECTORY);
  if (out.fd < 0) {
    int err = errno;
    if (err == ELOOP) {
      return diagnostic("sandbox: workspace " + ws +
                        ": a component of the path is a symbolic link, which is never followed "
                        "(a link planted by an earlier run could send this one elsewhere); give "
                        "the real path (realpath " +
                        ws + ")");
    }
    if (err == ENOTDIR) return diagnostic("sandbox: workspace " + ws + " is not a directory");
    return diagnostic(sysFailure("workspace " + ws, "openat2", err));
  }
  auto fail = [&](Diagnostic d) {
    close(out.fd);
    return Result<CheckedWorkspace>(std::move(d));
  };
  out.path = descriptorPath(out.fd);
  if (out.path.empty() || fstat(out.fd, &out.st) != 0) {
    return fail(diagnostic(sysFailure("workspace " + ws, "readlink /proc/self/fd", errno)));
  }
  const std::string& p = out.path;
  const std::string instead =
      "give --workspace a project directory of its own (e.g. a checkout under it)";
  for (const char* dir : {"/", "/tmp", "/var/tmp", "/home", "/srv", "/mnt", "/media", "/snap"}) {
    if (p == dir) {
      return fail(refuse(p,
                         "it is a system or shared directory (the workload could change what "
                         "every user and program relies on, or reach their sockets)",
                         instead));
    }
  }
  // What the system installs and keeps (libraries, logs, spools, other services' and runs'
  // state): the directory and each one directly in it. A root-owned workspace is idmapped to
  // the run, so binding /usr/lib or /var/lib/<service> would hand the workload root's 0600 files
  // there and every host program that loads them. A directory made for work below them
  // (/var/lib/ci/checkout) is allowed. Compared on the canonical path, so /lib/x on a merged-/usr
  // host is /usr/lib/x here.
  if (auto sys = systemDirectoryOf(p)) {
    return fail(refuse(p,
                       *sys == p ? "it is a system or shared directory (installed files, "
                                   "logs, spools or services' state)"
                                 : "it is directly in the system directory " + *sys +
                                       " (installed files, logs, spools or another service's "
                                       "state, not a directory made for work)",
                       instead + " deeper down"));
  }
  for (const char* dir : {"/proc", "/dev", "/sys", "/run", "/etc"}) {
    if (isUnder(p, dir)) {
      return fail(refuse(p,
                         std::string("it is under ") + dir +
                             " (kernel interfaces, devices, host sockets or system "
                             "configuration)",
                         instead));
    }
  }
  for (const auto& home : homeDirectories(out.st.st_uid)) {
    if (resolvePath(home) == p) {
      return fail(refuse(p,
                         "it is a home directory (the workload could write its .bashrc, "
                         ".ssh/authorized_keys and every other dotfile)",
                         instead));
    }
  }
  for (const auto& h : hiddenPaths) {
    std::string r = resolvePath(h);
    if (!r.empty() && isUnder(r, p)) {
      return fail(refuse(p,
                         "it holds " + r +
                             ", which the sandbox must not see (sandgate's config, a "
                             "secret, the CA key or an admin socket)",
                         "keep the workspace apart from sandgate's files and secrets"));
    }
  }
  return out;
}

int idmappedWorkspace(const CheckedWorkspace& ws, uid_t uid, gid_t gid, std::string* why) {
  // A user namespace that only carries the mapping: on-disk owner -> the run's uid.
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) {
    *why = sysFailure("idmapped workspace", "pipe2", errno);
    return -1;
  }
  pid_t child = fork();
  if (child < 0) {
    *why = sysFailure("idmapped workspace", "fork", errno);
    close(ready[0]);
    close(ready[1]);
    return -1;
  }
  if (child == 0) {
    char c = unshare(CLONE_NEWUSER) == 0 ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();  // killed by the parent once it holds the namespace
    _exit(0);
  }
  close(ready[1]);
  char c = 'n';
  if (read(ready[0], &c, 1) != 1 || c != 'y')
    *why = "idmapped workspace: unshare(CLONE_NEWUSER) failed";
  close(ready[0]);
  const std::string proc = "/proc/" + std::to_string(child) + "/";
  for (const auto& [file, id] : {std::pair{"uid_map", std::pair{ws.st.st_uid, uid}},
                                 std::pair{"gid_map", std::pair{ws.st.st_gid, gid}}}) {
    if (why->empty()) {
      *why = writeProcFile(proc + file,
                           std::to_string(id.first) + " " + std::to_string(id.second) + " 1\n");
    }
  }
  int userns = -1;
  if (why->empty()) {
    std::string ns = "/proc/" + std::to_string(child) + "/ns/user";
    userns = open(ns.c_str(), O_RDONLY | O_CLOEXEC);
    if (userns < 0) *why = sysFailure("open " + ns, "open", errno);
  }
  kill(child, SIGKILL);
  while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (userns < 0) return -1;
  int tree = static_cast<int>(
      syscall(SYS_open_tree, ws.fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
  if (tree < 0) {
    *why = sysFailure("idmapped workspace", "open_tree", errno);
    close(userns);
    return -1;
  }
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  attr.userns_fd = static_cast<uint64_t>(userns);
  long rc = syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr);
  int err = errno;
  close(userns);
  if (rc != 0) {
    *why = sysFailure("idmapped workspace", "mount_setattr(MOUNT_ATTR_IDMAP)", err);
    close(tree);
    return -1;
  }
  return tree;
}

Result<std::vector<int>> lockWorkspace(const CheckedWorkspace& ws, bool exclusive) {
  std::vector<int> held;
  auto fail = [&](std::string message) {
    for (int fd : held) close(fd);
    return Result<std::vector<int>>(diagnostic(std::move(message)));
  };
  // flock needs a descriptor opened for reading (an O_PATH one is refused).
  int fd = ::openat(ws.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return fail(sysFailure("lock the workspace " + ws.path, "openat", errno));
  held.push_back(fd);
  if (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK)
      return fail(sysFailure("lock the workspace " + ws.path, "flock", errno));
    return fail("sandbox: the workspace " + ws.path + " is in use by another run" +
                (exclusive ? "" : " in bind mode") +
                ": a bind run has a workspace to itself (runs in one workspace would share its "
                "sockets and files); wait for it to end, or use overlay mode "
                "(--workspace-mode overlay) for runs side by side");
  }
  if (!exclusive) return held;
  // A bind run also holds every directory above its workspace shared, so that a bind run of a
  // directory that holds this one (which would see this run's sockets) and this one exclude
  // each other, while bind runs of sibling directories do not. Reached by "..", never by name;
  // a directory above that this user may not read (rootless) is skipped.
  struct stat prev = ws.st;
  for (int depth = 0; depth < 4096; ++depth) {
    int up = ::openat(held.back(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (up < 0 && errno == EACCES)
      up = ::openat(held.back(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat st {};
    if (up < 0 || fstat(up, &st) != 0) {
      if (up >= 0) close(up);
      break;
    }
    held.push_back(up);
    if (st.st_dev == prev.st_dev && st.st_ino == prev.st_ino) break;  // "/" is its own parent
    prev = st;
    if (flock(up, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
      return fail("sandbox: the workspace " + ws.path +
                  " is in use by another run: a bind run holds a directory above it, where it "
                  "would share this run's sockets and files; wait for it to end, or use overlay "
                  "mode (--workspace-mode overlay)");
    }
  }
  return held;
}

Result<OverlayLayers> prepareOverlayLayers(const std::string& dir, const CheckedWorkspace& ws,
                                           uid_t uid, gid_t gid, bool rootless) {
  const std::string what = "sandbox: overlay layers " + dir;
  safe_open::UniqueFd fd(safe_open::openNoSymlinks(dir, O_RDONLY | O_DIRECTORY));
  if (!fd.valid()) {
    return diagnostic(what + ": cannot open it: " + safe_open::describeError(errno));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return diagnostic(sysFailure(what, "fstat", errno));
  if (st.st_uid != geteuid()) {
    return diagnostic(what + ": it belongs to uid " + std::to_string(st.st_uid) +
                      ", not to the launcher's " + std::to_string(geteuid()));
  }
  // The upper layer inside the lower one would let the run's writes show up in the workspace.
  int within = safe_open::isWithin(fd.get(), ws.st.st_dev, ws.st.st_ino);
  if (within != 0) {
    return diagnostic(what + (within < 0 ? ": cannot tell whether it is inside the workspace"
                                         : ": it is inside the workspace " + ws.path));
  }
  for (const char* sub : {"upper", "work"}) {
    if (mkdirat(fd.get(), sub, 0700) != 0) {
      return diagnostic(sysFailure(what + ": create " + sub, "mkdirat", errno));
    }
    if (!rootless && fchownat(fd.get(), sub, uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return diagnostic(
          sysFailure(what + ": give " + sub + " to the run's uid", "fchownat", errno));
    }
  }
  // The overlay's root takes the upper directory's mode: the workspace's own, not 0700.
  if (fchmodat(fd.get(), "upper", ws.st.st_mode & 0777, 0) != 0 || fchmod(fd.get(), 0700) != 0) {
    return diagnostic(sysFailure(what, "fchmod", errno));
  }
  OverlayLayers out;
  out.dev = st.st_dev;
  out.ino = st.st_ino;
  if (rootless) {
    out.path = descriptorPath(fd.get());
    if (out.path.empty()) return diagnostic(sysFailure(what, "readlink /proc/self/fd", errno));
    return out;
  }
  // Root: the run's uid cannot traverse the 0700 run directory above `dir`, so the sandbox gets
  // this directory as a mount of its own rather than a path.
  if (fchown(fd.get(), uid, gid) != 0) {
    return diagnostic(sysFailure(what + ": give it to the run's uid", "fchown", errno));
  }
  int tree = static_cast<int>(
      syscall(SYS_open_tree, fd.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
  if (tree < 0) return diagnostic(sysFailure(what, "open_tree", errno));
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    int err = errno;
    close(tree);
    return diagnostic(sysFailure(what, "mount_setattr", err));
  }
  out.fd = tree;
  return out;
}

Result<WorkspaceCopy> copyWorkspace(const CheckedWorkspace& ws, const std::string& dir, uid_t uid,
                                    gid_t gid, const std::string& why) {
  const std::string what = "sandbox: copy the workspace " + ws.path + " (" + why + ")";
  safe_open::UniqueFd from(::openat(ws.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  safe_open::UniqueFd to(safe_open::openNoSymlinks(dir + "/upper", O_RDONLY | O_DIRECTORY));
  if (!from.valid() || !to.valid()) {
    return diagnostic(what + ": " + safe_open::describeError(errno));
  }
  CopyStats stats;
  if (auto e = copyTree(from.get(), to.get(), uid, gid, &stats); !e.empty()) {
    return diagnostic(what + ": " + e);
  }
  // The workspace's own mode on the copy's root (prepareOverlayLayers set it on upper/).
  if (fchmod(to.get(), ws.st.st_mode & 0777) != 0)
    return diagnostic(sysFailure(what, "fchmod", errno));
  int tree = static_cast<int>(
      syscall(SYS_open_tree, to.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
  if (tree < 0) return diagnostic(sysFailure(what, "open_tree", errno));
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    int err = errno;
    close(tree);
    return diagnostic(sysFailure(what, "mount_setattr", err));
  }
  WorkspaceCopy out;
  out.fd = tree;
  out.why = why + ": the run works on a copy of the workspace (" + std::to_string(stats.files) +
            " files, " + std::to_string(stats.bytes) + " bytes, " +
            std::to_string(stats.reflinked) +
            " reflinked) in its upper layer; the host's directory is not written";
  return out;
}

}  // namespace sandgate::sandbox
