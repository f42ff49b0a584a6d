// `sandgate run --proxy unix:PATH`: the sandbox's listeners are served by a running
// `sandgate serve`, reached over its admin socket (listen.admin), instead of an embedded proxy.
#pragma once

#include <optional>
#include <string>

#include "common/safe_open.h"
#include "run/run_bundle.h"
#include "run/run_task.h"
#include "sandbox/launcher.h"

namespace sandgate::run {

// `options` holds what the flags asked for (limits, --env, workspace, argv, transparent).
// Asks serve for the task's CA and placeholders and for its capture ports and pools, runs the
// sandbox with its listeners (and its DNS stub and capture listeners) handed to serve, keeps
// the admin connection open until the command has ended (serve closes them all when it ends),
// and reports with the traffic summary and DNS counts serve sends back. Exit statuses as
// runTask().
// `report`: the --report file, opened already (or not valid).
// `bundle`: the run's directory (RunBundle::begin), or nullptr.
int runWithServe(const RunRequest& req, sandbox::Options options, safe_open::UniqueFd report,
                 RunBundle* bundle);

// The usage errors of a --proxy run (the PATH's form, flags that cannot go with it, no
// --task), found before anything is made for the run; nullopt when there are none.
std::optional<std::string> serveRequestProblem(const RunRequest& req);

}  // namespace sandgate::run
