// openNoSymlinks (see no_symlinks.h).
#include "sandbox/no_symlinks.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace sandgate::sandbox {

int openNoSymlinks(const std::string& path, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how);
  if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
  if (path.empty() || path[0] != '/') {
    errno = EINVAL;
    return -1;
  }
  int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  size_t pos = 1;
  for (int i = 0; dir >= 0 && i < 4096; ++i) {
    size_t next = path.find('/', pos);
    bool last = next == std::string::npos;
    std::string name = path.substr(pos, last ? std::string::npos : next - pos);
    if (name.empty() && last) return dir;  // a trailing slash
    int f = last ? (flags | O_NOFOLLOW) : (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd2 = name.empty() ? dup(dir) : openat(dir, name.c_str(), f, 0);
    int err = errno;
    close(dir);
    if (fd2 < 0) {
      errno = err;
      return -1;
    }
    if (last) return fd2;
    dir = fd2;
    pos = next + 1;
  }
  errno = ENAMETOOLONG;
  return -1;
}

}  // namespace sandgate::sandbox
