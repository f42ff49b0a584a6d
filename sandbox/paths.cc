// Path helpers (see paths.h).
#include "sandbox/paths.h"

#include <climits>
#include <cstdlib>

namespace sandgate::sandbox {

bool isUnder(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

std::string resolvePath(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return {};
  return buf;
}

}  // namespace sandgate::sandbox
