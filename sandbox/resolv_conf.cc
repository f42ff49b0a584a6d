// The sandbox's resolv.conf: planned on the host, written in the new mount namespace.
#include "sandbox/resolv_conf.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "common/safe_open.h"
#include "sandbox/capture_net.h"
#include "sandbox/sys_error.h"

namespace sandgate::sandbox {

namespace {

constexpr const char* kResolvConf = "/etc/resolv.conf";
constexpr const char* kOurCopy = "/run/sandgate/resolv.conf";

bool under(const std::string& path, const char* dir) {
  size_t n = std::strlen(dir);
  return path.compare(0, n, dir) == 0 && path.size() > n && path[n] == '/';
}

void writeFile(const std::string& path, const std::string& text) {
  int fd = checkSys(open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0444),
                    "create " + path, "open");
  if (!safe_open::writeAll(fd, text)) {
    int err = errno;
    close(fd);
    throwSys("write " + path, "write", err);
  }
  close(fd);
}

void mkdirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string p = path.substr(0, i);
      if (mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) throwSys("create " + p, "mkdir");
    }
  }
}

}  // namespace

void planResolvConf(FilesystemPlan* plan) {
  plan->resolvConf =
      std::string("# sandgate: the sandbox's DNS stub (transparent mode)\nnameserver ") +
      kDnsStubAddress + "\noptions edns0\n";
  std::string target = kResolvConf;
  // Follow symlinks by hand (bounded): realpath(3) fails on a dangling one, and systemd's
  // points into /run, which the sandbox replaces.
  for (int i = 0; i < 8; ++i) {
    char link[PATH_MAX];
    ssize_t n = readlink(target.c_str(), link, sizeof link - 1);
    if (n <= 0) break;
    link[n] = '\0';
    std::string next = link;
    if (next[0] != '/') next = target.substr(0, target.rfind('/') + 1) + next;
    char resolved[PATH_MAX];
    // Resolve the directory part (it exists on the host); keep the last component as is.
    std::string dir = next.substr(0, next.rfind('/'));
    std::string base = next.substr(next.rfind('/') + 1);
    if (realpath(dir.empty() ? "/" : dir.c_str(), resolved) == nullptr) {
      // The directory itself does not exist (e.g. /run/systemd/resolve): keep it lexically.
      target = next;
      continue;
    }
    target = std::string(resolved) + (std::strcmp(resolved, "/") == 0 ? "" : "/") + base;
  }
  plan->resolvConfTarget = target;
}

void installResolvConf(const std::string& newRoot, const FilesystemPlan& plan,
                       std::vector<std::string>* warnings) {
  if (plan.resolvConf.empty()) return;
  const std::string& t = plan.resolvConfTarget;
  if (under(t, "/run") || under(t, "/tmp")) {
    // Already a private tmpfs: write the file where the host's symlink points.
    std::string path = newRoot + t;
    mkdirs(path.substr(0, path.rfind('/')));
    writeFile(path, plan.resolvConf);
    return;
  }
  std::string ours = newRoot + kOurCopy;
  writeFile(ours, plan.resolvConf);
  std::string target = newRoot + t;
  struct stat st {};
  if (stat(target.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    warnings->push_back("transparent mode: " + t +
                        " is not a file that can be covered; the command has no DNS");
    return;
  }
  checkSys(mount(ours.c_str(), target.c_str(), nullptr, MS_BIND, nullptr),
           "bind the DNS stub's resolv.conf over " + t, "mount");
  checkSys(mount(nullptr, target.c_str(), nullptr,
                 MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr),
           "remount resolv.conf read-only", "mount");
}

}  // namespace sandgate::sandbox
