// Formatting of system-call failures for the launcher's diagnostics.
#include "sandbox/sys_error.h"

#include <cstring>

namespace sandgate::sandbox {

std::string describeErrno(int err) {
  const char* name = strerrorname_np(err);
  std::string out = name ? name : ("errno " + std::to_string(err));
  out += " (";
  out += strerror(err);
  out += ")";
  return out;
}

std::string sysFailure(std::string_view step, std::string_view call, int err) {
  std::string out = "sandbox: ";
  out += step;
  out += ": ";
  out += call;
  out += "(2) failed: ";
  out += describeErrno(err);
  return out;
}

void throwSys(std::string_view step, std::string_view call, int err) {
  throw SetupError(sysFailure(step, call, err));
}

}  // namespace sandgate::sandbox
