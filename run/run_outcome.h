// How `sandgate run` ends, whichever proxy served it: messages about the sandbox's end, the
// --report file, and the exit status.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <utility>

#include "common/result.h"
#include "common/safe_open.h"
#include "proxy/capture_server/capture.h"
#include "proxy/server/embedded.h"
#include "run/run_bundle.h"
#include "run/run_limits.h"
#include "run/run_task.h"
#include "sandbox/launcher.h"

namespace sandgate::run {

// Prints "sandgate run: <message>" to stderr and returns `status` (for `return fail(...)`).
template <typename... Args>
int fail(int status, fmt::format_string<Args...> f, Args&&... args) {
  fmt::print(stderr, "sandgate run: {}\n", fmt::format(f, std::forward<Args>(args)...));
  return status;
}

// Prints the DNS stub's counts (when it was asked), warnings and how the sandbox ended to
// stderr, writes the report to `report` (--report, opened before the sandbox started: see
// run/output_files.h) when it is valid, with `limits` (the run's), and returns the exit status
// of `sandgate run` (the command's, or kExitSetupFailed). `bundle` (the run's directory) is
// finished first: its changes go in the report, which is written there too.
int finishRun(const RunRequest& req, const std::string& task, const std::string& policy,
              const Result<sandbox::RunResult>& result, const RunLimits& limits,
              const proxy::TrafficSummary& traffic, safe_open::UniqueFd report, RunBundle* bundle,
              const std::optional<proxy::CaptureCounts>& dns = std::nullopt);

}  // namespace sandgate::run
