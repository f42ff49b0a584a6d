// Setup failures that name the step, the system call and errno, as the launcher reports them.
#pragma once

#include <cerrno>
#include <stdexcept>
#include <string>
#include <string_view>

#include "common/result.h"

namespace sandgate::sandbox {

// "EPERM (Operation not permitted)".
std::string describeErrno(int err);

// "sandbox: mount /proc: mount(2) failed: EPERM (Operation not permitted)".
std::string sysFailure(std::string_view step, std::string_view call, int err);

// Thrown only inside the forked sandbox processes (never across the public API): the top of
// each child catches it, sends the message to the launcher over the control channel and exits.
class SetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A launcher-side error for Result<T> (no file position: these are not config errors).
inline Diagnostic diagnostic(std::string message) {
  Diagnostic d;
  d.message = std::move(message);
  return d;
}

[[noreturn]] void throwSys(std::string_view step, std::string_view call, int err = errno);

// Throws SetupError(sysFailure(...)) when `rc` is -1 (the usual system-call convention).
inline long checkSys(long rc, std::string_view step, std::string_view call) {
  if (rc == -1) throwSys(step, call, errno);
  return rc;
}

}  // namespace sandgate::sandbox
