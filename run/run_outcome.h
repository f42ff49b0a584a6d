// How `sandgate run` ends, whichever proxy served it: messages about the sandbox's end, the
// --report file, and the exit status.
#pragma once

#include <string>

#include "common/result.h"
#include "proxy/embedded.h"
#include "run/run_task.h"
#include "sandbox/launcher.h"

namespace sandgate::run {

// Prints warnings and how the sandbox ended to stderr, writes --report if asked, and returns
// the exit status of `sandgate run` (the command's, or kExitSetupFailed).
int finishRun(const RunRequest& req, const std::string& task, const std::string& policy,
              const Result<sandbox::RunResult>& result, const proxy::TrafficSummary& traffic);

}  // namespace sandgate::run
