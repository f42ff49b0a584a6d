// Choosing the sandbox's unprivileged identity and writing its user-namespace id maps.
#include "sandbox/identity.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

// The primary group of `uid` from /etc/passwd (read directly: getpwuid may consult NSS modules
// that are not safe to load in a process that forks afterwards).
std::optional<gid_t> primaryGroup(uid_t uid) {
  FILE* f = std::fopen("/etc/passwd", "re");
  if (f == nullptr) return std::nullopt;
  std::optional<gid_t> gid;
  passwd pw{};
  passwd* found = nullptr;
  char buf[4096];
  for (int i = 0; i < 100000 && fgetpwent_r(f, &pw, buf, sizeof buf, &found) == 0; ++i) {
    if (found->pw_uid == uid) {
      gid = found->pw_gid;
      break;
    }
  }
  std::fclose(f);
  return gid;
}

std::string writeFile(const std::string& path, const std::string& content) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return sysFailure("write " + path, "open", errno);
  ssize_t n = write(fd, content.data(), content.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(content.size())) {
    return sysFailure("write '" + content.substr(0, content.size() - 1) + "' to " + path, "write",
                      n < 0 ? err : EIO);
  }
  return {};
}

}  // namespace

Result<Identity> chooseIdentity(const Options& options, const std::string& workspace) {
  Identity id;
  if (geteuid() != 0) {
    id.rootless = true;
    id.uid = geteuid();
    id.gid = getegid();
    if (options.uid && *options.uid != id.uid) {
      return diagnostic("sandbox: uid " + std::to_string(*options.uid) +
                        " requested but the launcher is not root: a rootless "
                        "launcher can only map its own uid " +
                        std::to_string(id.uid));
    }
    if (options.gid && *options.gid != id.gid) {
      return diagnostic("sandbox: gid " + std::to_string(*options.gid) +
                        " requested but a rootless launcher can only map its own gid " +
                        std::to_string(id.gid));
    }
    return id;
  }
  struct stat st {};
  if (stat(workspace.c_str(), &st) != 0) {
    return diagnostic(sysFailure("workspace " + workspace, "stat", errno));
  }
  bool fromWorkspace = false;
  if (options.uid) {
    if (*options.uid == 0) {
      return diagnostic(
          "sandbox: uid 0 refused: the workload would be root on the "
          "host; pick an unprivileged uid");
    }
    id.uid = *options.uid;
  } else if (st.st_uid != 0) {
    id.uid = st.st_uid;
    fromWorkspace = true;
  } else {
    id.uid = kNobody;  // see Options: never map host root, never borrow another user's uid
  }
  if (options.gid) {
    if (*options.gid == 0) {
      return diagnostic(
          "sandbox: gid 0 refused: the workload would hold the host's "
          "root group; pick an unprivileged gid");
    }
    id.gid = *options.gid;
  } else if (fromWorkspace && st.st_gid != 0) {
    id.gid = st.st_gid;
  } else if (auto g = primaryGroup(id.uid); g && *g != 0) {
    id.gid = *g;
  } else {
    id.gid = kNobody;
  }
  return id;
}

std::string writeIdMaps(pid_t pid, const Identity& id) {
  std::string proc = "/proc/" + std::to_string(pid) + "/";
  if (auto e = writeFile(proc + "setgroups", "deny\n"); !e.empty()) return e;
  if (auto e = writeFile(proc + "uid_map",
                         std::to_string(id.uid) + " " + std::to_string(id.uid) + " 1\n");
      !e.empty()) {
    return e;
  }
  return writeFile(proc + "gid_map",
                   std::to_string(id.gid) + " " + std::to_string(id.gid) + " 1\n");
}

}  // namespace sandgate::sandbox
