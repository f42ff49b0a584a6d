// How `sandgate run` ends (see run_outcome.h).
#include "run/run_outcome.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "run/run_report.h"

namespace sandgate::run {

int finishRun(const RunRequest& req, const std::string& task, const std::string& policy,
              const Result<sandbox::RunResult>& result, const RunLimits& limits,
              const proxy::TrafficSummary& traffic, safe_open::UniqueFd report,
              const std::optional<proxy::CaptureCounts>& dns) {
  if (!result) {
    for (const auto& e : result.errors()) fmt::print(stderr, "sandgate run: {}\n", e.str());
    return kExitSetupFailed;
  }
  const auto& rr = result.value();
  // Said only when the stub was used: most runs that honour the proxy variables never ask.
  if (dns && dns->queries() > 0) fmt::print(stderr, "sandgate run: dns: {}\n", dns->summary());
  for (const auto& w : rr.warnings) fmt::print(stderr, "sandgate run: warning: {}\n", w);
  for (const auto& u : rr.unenforced) {
    // A default limit that was not enforced is already one of the warnings.
    bool warned = std::any_of(rr.warnings.begin(), rr.warnings.end(),
                              [&](const std::string& w) { return w.find(u) != w.npos; });
    if (!warned) fmt::print(stderr, "sandgate run: not enforced: {}\n", u);
  }
  if (rr.end == sandbox::RunResult::End::kSetupFailed) {
    fmt::print(stderr, "sandgate run: the sandbox could not be set up: {}\n", rr.error);
  } else if (rr.end == sandbox::RunResult::End::kTimeout) {
    fmt::print(stderr, "sandgate run: timed out after {}\n",
               limits.timeout ? formatDuration(*limits.timeout) : "the timeout");
  } else if (rr.end == sandbox::RunResult::End::kMemoryLimit) {
    if (limits.memoryBytes) {
      fmt::print(stderr, "sandgate run: killed by the memory limit ({})\n",
                 formatSize(*limits.memoryBytes));
    } else {
      fmt::print(stderr, "sandgate run: killed by the out-of-memory killer\n");
    }
  }
  if (report.valid()) {
    // Through the descriptor opened before the sandbox started: whatever the workload did
    // to paths since, this writes the file that was checked then.
    ReportInput in{task, policy, req.argv, rr, traffic, dns, limits};
    if (!safe_open::writeAll(report.get(), formatReport(in))) {
      fmt::print(stderr, "sandgate run: cannot write the report to {}: {}\n",
                 req.reportPath.value_or("?"), std::strerror(errno));
      if (rr.exitStatus == 0) return kExitSetupFailed;
    }
  }
  return rr.exitStatus;
}

}  // namespace sandgate::run
