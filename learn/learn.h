// `policy learn` and `policy diff` end to end, minus the argument parsing: read the audits,
// draft (or propose additions to an existing config), check the draft compiles and allows
// what the audit allowed, write the test cases; or compare two configs' decisions.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "learn/generalise.h"

namespace sandgate::learn {

// Exit statuses of both commands (README "Writing a policy").
inline constexpr int kExitOk = 0;
inline constexpr int kExitChanged = 1;  // diff: a decision changed; learn: the draft is wrong
inline constexpr int kExitError = 2;    // usage, unreadable file, bad config, --strict

struct LearnOptions {
  std::vector<std::string> audits;  // "-": stdin
  std::string task;                 // empty: every task
  int generalise = kDefaultGeneralise;
  bool explain = false;
  bool strict = false;
  std::optional<std::string> merge;  // an existing config to propose additions to
  bool wantTests = false;
};

struct LearnOutput {
  int exit = kExitOk;
  std::string config;                 // for stdout
  std::string tests;                  // the --tests file's text
  std::vector<std::string> messages;  // for stderr, one a line
};

LearnOutput learnPolicy(const LearnOptions& options, std::istream& stdinStream);

struct DiffOptions {
  std::string before, after;  // config files
  std::vector<std::string> audits;
  std::string task;
  bool strict = false;
};

struct DiffOutput {
  int exit = kExitOk;
  std::string report;                 // for stdout
  std::vector<std::string> messages;  // for stderr
};

DiffOutput diffPolicies(const DiffOptions& options, std::istream& stdinStream);

}  // namespace sandgate::learn
