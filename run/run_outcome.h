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

// A run that failed before its command could start, once its directory exists: prints
// `errors`, writes the report ("end": "setup_failed", the errors as its `error`, `status` as
// its exit status) to the run's directory and to --report, and returns `status`: kExitUsage
// for a config or usage problem (a secret source the config names that cannot be read, an
// earlier run --resume cannot use), kExitSetupFailed when the sandbox or the proxy could not
// start. `runs` and `show` then say why, instead of listing a directory with nothing in it.
int finishSetupFailure(const RunRequest& req, const std::string& task, const std::string& policy,
                       const Diagnostics& errors, int status, const RunLimits& limits,
                       safe_open::UniqueFd report, RunBundle* bundle);

}  // namespace sandgate::run
