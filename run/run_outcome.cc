// How `sandgate run` ends (see run_outcome.h).
#include "run/run_outcome.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/terminal_text.h"
#include "run/run_dir.h"
#include "run/run_report.h"

namespace sandgate::run {
namespace {

// A word a shell reads back as `word`: as it is when every byte is plain, else in single
// quotes. A name with a byte a terminal would obey is quoted for the terminal instead
// (quoteName): what the workload named cannot rewrite the lines it is printed on.
std::string shellWord(const std::string& word) {
  if (needsEscape(word) || quoteName(word) != word) return quoteName(word);
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_./:@%+=,-") == std::string::npos) {
    return word;
  }
  std::string out = "'";
  for (char ch : word) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// How the review commands name this run so that they work as printed, from any directory: its
// id when it is in the default run directory (where an id is looked up), else its absolute
// directory (a relative --run-dir, or an id, would not be found there).
std::string reviewName(const std::string& id, const std::string& dir) {
  const std::string base = defaultRunsDirectory();
  char real[PATH_MAX];  // the run's directory was made below the resolved base
  if (!base.empty() && ::realpath(base.c_str(), real) != nullptr &&
      dir == std::string(real) + "/" + id) {
    return shellWord(id);
  }
  return shellWord(dir);
}

// Where the run's files are, what it did on the network and what changed: the last lines a
// user reads. The audit lines themselves are not on stderr by default (the command's output is
// there: a line of it written in pieces would be cut by one of ours); this says where they are.
void describeBundle(const boost::json::object& extra, const proxy::TrafficSummary& traffic,
                    bool served) {
  const auto& run = extra.at("run").as_object();
  const std::string id(run.at("id").as_string());
  const std::string dir(run.at("dir").as_string());
  const std::string name = reviewName(id, dir);
  fmt::print(stderr, "sandgate run: run {} ({} workspace): {}\n", quoteName(id),
             std::string(run.at("workspace_mode").as_string()), quoteName(dir));
  const uint64_t total = traffic.allowed + traffic.denied + traffic.other;
  std::string where;
  if (served) {
    where = "in the audit log of sandgate serve (its lines name this run)";
  } else {
    where = "in " + quoteName(dir + "/" + bundle::kAudit);
    const auto* left = run.if_contains("audit_lines_not_logged");
    const int64_t n = left == nullptr     ? 0
                      : left->is_int64()  ? left->as_int64()
                      : left->is_uint64() ? static_cast<int64_t>(left->as_uint64())
                                          : 0;
    if (n > 0) where += fmt::format(" ({} more left out at its size limit)", n);
  }
  if (total == 0) {
    fmt::print(stderr, "sandgate run: network: no requests\n");
  } else {
    fmt::print(stderr,
               "sandgate run: network: {} requests: {} allowed, {} denied{}; audit lines {}\n",
               total, traffic.allowed, traffic.denied,
               traffic.other ? fmt::format(", {} other", traffic.other) : "", where);
  }
  if (!extra.at("changes").is_object()) return;
  const auto& c = extra.at("changes").as_object();
  fmt::print(stderr,
             "sandgate run: changes: {} added, {} modified, {} deleted, {} mode; review with "
             "`sandgate show {}` and `sandgate diff {}`, then `sandgate apply {}` or "
             "`sandgate discard {}`\n",
             c.at("added").as_uint64(), c.at("modified").as_uint64(), c.at("deleted").as_uint64(),
             c.at("mode").as_uint64(), name, name, name, name);
  // Every .git path git runs or obeys is flagged (a `git init` in the run flags its sample
  // hooks): the first 20 here, all of them in `sandgate show`.
  const auto& flagged = c.at("flagged").as_array();
  for (size_t i = 0; i < flagged.size() && i < 20; ++i) {
    fmt::print(stderr,
               "sandgate run: WARNING: the run wrote {} (git runs it or obeys it outside the "
               "sandbox); it is never applied\n",
               quoteName(flagged[i].as_string()));
  }
  if (flagged.size() > 20) {
    fmt::print(stderr, "sandgate run: WARNING: and {} more such paths (`sandgate show {}`)\n",
               flagged.size() - 20, name);
  }
}

// finishRun(), with the exit status of a setup that failed (`result` holds its errors).
int finish(const RunRequest& req, const std::string& task, const std::string& policy,
           const Result<sandbox::RunResult>& result, int setupStatus, const RunLimits& limits,
           const proxy::TrafficSummary& traffic, safe_open::UniqueFd report, RunBundle* bundle,
           const std::optional<proxy::CaptureCounts>& dns) {
  boost::json::object extra;
  std::vector<std::string> bundleWarnings;
  if (bundle != nullptr)
    extra = bundle->finish(&bundleWarnings, result ? result->workspaceCopy : "");
  sandbox::RunResult rr;
  if (result) {
    rr = result.value();
  } else {
    // The run's directory still gets its report: `runs` and `show` say the setup failed and
    // why, instead of a directory with nothing to read.
    rr.end = sandbox::RunResult::End::kSetupFailed;
    rr.exitStatus = setupStatus;
    for (const auto& e : result.errors()) {
      fmt::print(stderr, "sandgate run: {}\n", escapeText(e.str(), true));
      rr.error += (rr.error.empty() ? "" : "; ") + e.str();
    }
  }
  rr.warnings.insert(rr.warnings.end(), bundleWarnings.begin(), bundleWarnings.end());
  // Said only when the stub was used: most runs that honour the proxy variables never ask.
  if (dns && dns->queries() > 0) fmt::print(stderr, "sandgate run: dns: {}\n", dns->summary());
  // A name the workload looked up is its bytes: escaped.
  if (dns) {
    for (const auto& h : dns->hints) {
      fmt::print(stderr, "sandgate run: dns: nxdomain for {}\n", escapeText(h, true));
    }
  }
  // The sandbox's warnings (and the limits it could not enforce) were logged once as they
  // happened, before the command's output they explain: only the bundle's are new here. A
  // warning may name the workload's files (what --disk left out): escaped, as everything the
  // workload's bytes reach a terminal through.
  for (const auto& w : bundleWarnings) {
    fmt::print(stderr, "sandgate run: warning: {}\n", escapeText(w, true));
  }
  if (rr.end == sandbox::RunResult::End::kSetupFailed && result) {
    fmt::print(stderr, "sandgate run: the sandbox could not be set up: {}\n",
               escapeText(rr.error, true));
  } else if (rr.end == sandbox::RunResult::End::kTimeout) {
    // The time it took too: a run that ignores SIGTERM ends only at the SIGKILL after the grace.
    fmt::print(stderr, "sandgate run: timed out after {} (ended {:.1f}s after the start)\n",
               limits.timeout ? formatDuration(*limits.timeout) : "the timeout", rr.seconds);
  } else if (rr.end == sandbox::RunResult::End::kMemoryLimit) {
    if (limits.memoryBytes) {
      fmt::print(stderr, "sandgate run: killed by the memory limit ({})\n",
                 formatSize(*limits.memoryBytes));
    } else {
      fmt::print(stderr, "sandgate run: killed by the out-of-memory killer\n");
    }
  }
  ReportInput in{task, policy, req.argv, rr, traffic, dns, limits, extra};
  const std::string text = formatReport(in);
  if (bundle != nullptr) {
    if (auto e = bundle->dir().write(bundle::kReport, text)) {
      fmt::print(stderr, "sandgate run: {}\n", *e);
      if (rr.exitStatus == 0) return kExitSetupFailed;
    }
    describeBundle(extra, traffic, req.proxy.has_value());
  }
  if (report.valid()) {
    // Through the descriptor opened before the sandbox started: whatever the workload did
    // to paths since, this writes the file that was checked then.
    if (!safe_open::writeAll(report.get(), text)) {
      fmt::print(stderr, "sandgate run: cannot write the report to {}: {}\n",
                 req.reportPath.value_or("?"), std::strerror(errno));
      if (rr.exitStatus == 0) return kExitSetupFailed;
    }
  }
  return rr.exitStatus;
}

}  // namespace

int finishRun(const RunRequest& req, const std::string& task, const std::string& policy,
              const Result<sandbox::RunResult>& result, const RunLimits& limits,
              const proxy::TrafficSummary& traffic, safe_open::UniqueFd report, RunBundle* bundle,
              const std::optional<proxy::CaptureCounts>& dns) {
  return finish(req, task, policy, result, kExitSetupFailed, limits, traffic, std::move(report),
                bundle, dns);
}

int finishSetupFailure(const RunRequest& req, const std::string& task, const std::string& policy,
                       const Diagnostics& errors, int status, const RunLimits& limits,
                       safe_open::UniqueFd report, RunBundle* bundle) {
  return finish(req, task, policy, Result<sandbox::RunResult>(errors), status, limits,
                proxy::TrafficSummary{}, std::move(report), bundle, std::nullopt);
}

}  // namespace sandgate::run
