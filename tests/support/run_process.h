// Runs a program to completion and captures its exit status, stdout and stderr (tests only).
#pragma once

#include <string>
#include <vector>

namespace sandgate::testing {

struct ProcessResult {
  int status = -1;  // exit status, or 128+signal
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with argv, no shell, stdin from /dev/null, bounded by
// `timeoutSeconds` (the child is killed by PID when it runs over).
ProcessResult runProcess(const std::vector<std::string>& argv, int timeoutSeconds = 60);

}  // namespace sandgate::testing
