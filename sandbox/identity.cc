// Choosing the sandbox's unprivileged identity and writing its user-namespace id maps.
#include "sandbox/identity.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>

#include "sandbox/sys_error.h"

namespace sandgate::sandbox {
namespace {

// Whether the host's user or group database (NSS: files, LDAP, SSSD, ...) knows `id`.
bool knownToTheHost(uint32_t id) {
  std::array<char, 4096> buf{};
  passwd pw{};
  passwd* pwFound = nullptr;
  if (getpwuid_r(id, &pw, buf.data(), buf.size(), &pwFound) == 0 && pwFound != nullptr) {
    return true;
  }
  group gr{};
  group* grFound = nullptr;
  return getgrgid_r(id, &gr, buf.data(), buf.size(), &grFound) == 0 && grFound != nullptr;
}

// Leases one id of [first, first + count): a lock file per id under /run/sandgate/ids, held
// with flock(2) by this launcher for the whole run (the kernel drops it if the launcher dies).
Result<std::pair<uint32_t, int>> leaseId(uint32_t first, uint32_t count) {
  // /run/sandgate as serve makes it for its admin sockets (0755, root's); the leases are root's.
  for (auto [dir, mode] :
       {std::pair{"/run/sandgate", 0755}, std::pair{"/run/sandgate/ids", 0700}}) {
    if (mkdir(dir, static_cast<mode_t>(mode)) != 0 && errno != EEXIST) {
      return diagnostic(
          sysFailure(std::string("lease a sandbox uid: create ") + dir, "mkdir", errno));
    }
  }
  // Start at a different place for each launcher: concurrent runs rarely try the same id.
  const uint32_t start = static_cast<uint32_t>(getpid()) * 2654435761u % count;
  const uint32_t tries = std::min<uint32_t>(count, 4096);
  for (uint32_t i = 0; i < tries; ++i) {
    uint32_t id = first + (start + i) % count;
    if (id == 0 || knownToTheHost(id)) continue;
    std::string lock = "/run/sandgate/ids/" + std::to_string(id);
    int fd = open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return diagnostic(sysFailure("lease a sandbox uid: open " + lock, "open", errno));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return std::make_pair(id, fd);
    close(fd);
  }
  return diagnostic("sandbox: no free uid in the sandbox id range " + std::to_string(first) + "-" +
                    std::to_string(first + count - 1) +
                    " (every one is held by a running sandbox or known to the host's user "
                    "database): widen sandbox.id_range");
}

}  // namespace

std::string writeProcFile(const std::string& path, const std::string& content) {
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

Result<Identity> chooseIdentity(const Options& options) {
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
  if (options.uid && *options.uid == 0) {
    return diagnostic(
        "sandbox: uid 0 refused: the workload would be root on the "
        "host; pick an unprivileged uid");
  }
  if (options.gid && *options.gid == 0) {
    return diagnostic(
        "sandbox: gid 0 refused: the workload would hold the host's "
        "root group; pick an unprivileged gid");
  }
  if (options.uid) {
    id.uid = *options.uid;
    id.gid = options.gid.value_or(*options.uid);
    return id;
  }
  if (options.idRangeCount == 0 ||
      uint64_t{options.idRangeFirst} + options.idRangeCount - 1 > uint64_t{0xFFFFFFFEu}) {
    return diagnostic("sandbox: the sandbox id range is empty or runs past 4294967294");
  }
  auto lease = leaseId(options.idRangeFirst, options.idRangeCount);
  if (!lease) return lease.errors();
  id.uid = lease->first;
  id.gid = options.gid.value_or(lease->first);
  id.leaseFd = lease->second;
  return id;
}

std::string writeIdMaps(pid_t pid, const Identity& id) {
  std::string proc = "/proc/" + std::to_string(pid) + "/";
  if (auto e = writeProcFile(proc + "setgroups", "deny\n"); !e.empty()) return e;
  if (auto e = writeProcFile(proc + "uid_map",
                             std::to_string(id.uid) + " " + std::to_string(id.uid) + " 1\n");
      !e.empty()) {
    return e;
  }
  return writeProcFile(proc + "gid_map",
                       std::to_string(id.gid) + " " + std::to_string(id.gid) + " 1\n");
}

}  // namespace sandgate::sandbox
