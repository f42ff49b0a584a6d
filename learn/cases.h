// Observed requests as `policy check` targets: the test cases `policy learn --tests` writes,
// and `policy diff`'s decision of each request under two configs. Both decide through
// policy::checkTarget(), the path `policy check` and `policy test` use.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "learn/audit_reader.h"
#include "policy/check.h"
#include "policy/engine.h"

namespace sandgate::learn {

// "https://host:port/path" for a visible request, "host:port" for a tunnel ([v6] bracketed).
std::string checkTargetOf(const Observation& o);

// The decision `engine` makes for `o` (its method and path when visible).
policy::CheckResult decideObserved(const policy::Engine& engine, const config::Config& cfg,
                                   const Observation& o);

// The `policy test` file for `requests` under the drafted config: one case per distinct
// request (task, target, method). A request the audit shows allowed expects allow; a refused
// one expects what the draft decides (with its reason when that is a deny), so the file
// passes on the draft and fails when an edit changes what was seen. `problems` gets each
// allowed request the draft does not allow (there should be none).
std::string renderCases(const std::vector<Observation>& requests, const policy::Engine& engine,
                        const config::Config& cfg, std::vector<std::string>* problems);

struct DecisionChange {
  const Observation* first = nullptr;  // the first request of its kind
  int count = 0;                       // identical requests (task, target, method)
  std::string target, method;
  policy::Decision before, after;
};

struct DiffResult {
  int decided = 0;  // distinct requests decided
  std::vector<DecisionChange> changes;
};

// Each distinct request of `requests` under both configs; a change is another verdict or
// another reason (the rule's file:line differs between two files anyway).
DiffResult diffDecisions(const std::vector<Observation>& requests, const policy::Engine& before,
                         const config::Config& beforeCfg, const policy::Engine& after,
                         const config::Config& afterCfg);

}  // namespace sandgate::learn
