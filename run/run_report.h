// The JSON summary `sandgate run --report FILE` writes: how the command ended and what it
// asked of the network, per host and reason.
#pragma once

#include <boost/json/object.hpp>
#include <optional>
#include <string>
#include <vector>

#include "proxy/capture_server/capture.h"
#include "proxy/server/embedded.h"
#include "run/run_limits.h"
#include "sandbox/launcher.h"

namespace sandgate::run {

struct ReportInput {
  std::string task;
  std::string policy;
  std::vector<std::string> command;
  sandbox::RunResult result;
  proxy::TrafficSummary traffic;
  std::optional<proxy::CaptureCounts> dns;  // transparent mode: the DNS stub's answers
  RunLimits limits;                         // what the run was given
  boost::json::object bundle;  // RunBundle::finish(): `run` and `changes` (absent: not set)
};

// One JSON object, newline-terminated. Fields: task, policy, command, exit_status, end
// (sandbox::endName), duration_seconds, peak_memory_bytes (null when unknown), limit_fired
// ("timeout" | "memory" | "pids" | null), requests {allowed, denied, other, bytes_up,
// bytes_down}, by_host [{host, port, kind, verdict, reason, count, bytes_up, bytes_down}],
// credentials_used (names from the audit lines), dns ({answered, nodata, nxdomain, refused,
// notimp, pool_exhausted, malformed, names}; null without transparent capture), limits
// (run_limits.h's limitsToJson: memory_bytes, pids, cpus, timeout_seconds, tmpfs_bytes, null
// for unlimited, and `enforced` per limit), warnings, unenforced, error (null unless the
// sandbox could not be set up); and, from the run's directory, run {id, dir, workspace,
// workspace_mode, started_at, policy_sha256, stdout_log_cut, stderr_log_cut} and changes
// (changes.h's changeSummary; null in bind mode).
std::string formatReport(const ReportInput& in);

}  // namespace sandgate::run
