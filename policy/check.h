// What-if evaluation for people: the decision sandgate would make for a typed target, and
// the runner for policy test cases. Same engine and same rules as the proxy, no network.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"
#include "config/test_cases.h"
#include "policy/engine.h"
#include "policy/target.h"

namespace sandgate::policy {

struct CheckResult {
  Decision decision;
  // The address a `resolve:` override gives the name, when there is one: it was vetted too,
  // exactly as the proxy would vet it before dialling.
  std::optional<IpAddress> resolvedAddress;
};

// Decides `target` for `task`. A URL target (or a --method) makes the request visible, so
// method and path rules apply (method defaults to GET for URLs); a host:port target is
// decided as a CONNECT would be. Names with a `resolve:` override are vetted against it.
CheckResult checkTarget(const Engine& engine, const config::Config& cfg, std::string_view task,
                        const CheckTarget& target, const std::optional<std::string>& method);

// A push of `ref` (":ref": deleting it) to the repository at `repository` (an https:// URL):
// the request git makes for it (POST <path>/git-receive-pack), then the admitting rule's `git:`
// block on the repository and on that one command.
CheckResult checkGitPush(const Engine& engine, const config::Config& cfg, std::string_view task,
                         const CheckTarget& repository, std::string_view ref);

struct CaseOutcome {
  bool passed = false;
  std::string message;  // for a failure: what was expected and what happened
  std::optional<CheckResult> result;  // absent when the target itself did not parse
};

CaseOutcome runCase(const Engine& engine, const config::Config& cfg, const config::TestCase& tc);

}  // namespace sandgate::policy
