// Formats the `sandgate run --report` JSON summary (see run_report.h).
#include "run/run_report.h"

#include <boost/json.hpp>

#include "proxy/admin/admin_protocol.h"

namespace sandgate::run {

namespace {
boost::json::array strings(const std::vector<std::string>& v) {
  boost::json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}
}  // namespace

std::string formatReport(const ReportInput& in) {
  using sandbox::RunResult;
  boost::json::object o;
  o["task"] = in.task;
  o["policy"] = in.policy;
  o["command"] = strings(in.command);
  o["exit_status"] = in.result.exitStatus;
  o["end"] = sandbox::endName(in.result.end);
  o["duration_seconds"] = in.result.seconds;
  if (in.result.peakMemoryBytes) {
    o["peak_memory_bytes"] = *in.result.peakMemoryBytes;
  } else {
    o["peak_memory_bytes"] = nullptr;
  }
  if (in.result.end == RunResult::End::kTimeout) {
    o["limit_fired"] = "timeout";
  } else if (in.result.end == RunResult::End::kMemoryLimit) {
    o["limit_fired"] = "memory";
  } else if (in.result.pidsLimitReached) {
    o["limit_fired"] = "pids";
  } else {
    o["limit_fired"] = nullptr;
  }
  const auto& t = in.traffic;
  o["requests"] = {{"allowed", t.allowed},
                   {"denied", t.denied},
                   {"other", t.other},
                   {"bytes_up", t.bytesUp},
                   {"bytes_down", t.bytesDown}};
  o["by_host"] = proxy::trafficEntriesToJson(t.entries);
  o["credentials_used"] = strings(t.credentials);
  // What the run could do differently, for a person or a harness that reads the report: today
  // the capture hints (a name the policy allows on a port this run did not capture; the first
  // CaptureCounts::kMaxHints), each "NAME: ... add `--capture-port P`". Empty when none.
  boost::json::array hints;
  if (in.dns) {
    auto dns = proxy::captureCountsToJson(*in.dns);
    dns.erase("hints");  // said once, in "hints"
    o["dns"] = std::move(dns);
    for (const auto& h : in.dns->hints) hints.emplace_back(h);
  } else {
    o["dns"] = nullptr;
  }
  o["hints"] = std::move(hints);
  o["limits"] = limitsToJson(in.limits, in.result.unenforced);
  o["warnings"] = strings(in.result.warnings);
  o["unenforced"] = strings(in.result.unenforced);
  if (in.result.error.empty()) {
    o["error"] = nullptr;
  } else {
    o["error"] = in.result.error;
  }
  // Bind runs: what the end-of-run sweep cleared (setuid/setgid bits, file capabilities) and
  // what it could not check; null for the other modes, whose runs do not write the host tree.
  if (const auto& s = in.result.sweep) {
    o["workspace_sweep"] = {
        {"cleared", s->cleared}, {"paths", strings(s->paths)}, {"errors", strings(s->errors)}};
  } else {
    o["workspace_sweep"] = nullptr;
  }
  for (const auto& [k, v] : in.bundle) o[k] = v;
  return boost::json::serialize(o) + "\n";
}

}  // namespace sandgate::run
