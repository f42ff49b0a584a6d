// A learning run's draft (`sandgate run --learn`, or a task with `mode: learn`): the policy the
// run's own audit lines call for, written into the run's directory with its test cases.
#pragma once

#include <string>
#include <vector>

#include "run/run_dir.h"

namespace sandgate::run {

namespace bundle {
inline constexpr const char* kLearned = "policy.learned.yaml";             // the proposal
inline constexpr const char* kLearnedTests = "policy.learned.tests.yaml";  // its `policy test`
}  // namespace bundle

// Drafts from `dir`'s audit.jsonl (task `task`) with `policy learn --merge` against the config
// the run used (`dir`'s policy.yaml): what that config refused, or admitted only because of
// learn mode, becomes rules of `learned-<task>`; its deny rules stay and are not proposed.
// Writes kLearned and kLearnedTests; problems go to `warnings` (the run's result stands).
void writeLearnedPolicy(const RunDir& dir, const std::string& task,
                        std::vector<std::string>* warnings);

}  // namespace sandgate::run
