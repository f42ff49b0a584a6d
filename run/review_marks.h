// What became of a run after it ended, for `sandgate runs`: applied (all of it, or the paths
// asked for) is marked in the run's directory; discarded (the directory is gone) is noted in
// the default run directory's `.discarded.jsonl`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "run/apply_changes.h"
#include "run/run_dir.h"

namespace sandgate::run {

inline constexpr const char* kAppliedMark = "applied.json";       // in the run's directory
inline constexpr const char* kDiscardedLog = ".discarded.jsonl";  // in the default directory

// Records that `req` applied `count` changes (replacing an earlier mark, never following a
// link). Returns why it could not, or nullopt.
std::optional<std::string> markApplied(const RunDir& dir, const ApplyRequest& req, size_t count);

// "applied", "applied (paths)" (--paths chose some), or "-".
std::string reviewState(const RunDir& dir);

// One run that `discard` removed.
struct DiscardedRun {
  std::string id, task, startedAt, command;  // command: already quoted for a terminal
};

// Notes that `dir` is about to be discarded, when it lies in the default run directory (the
// only one `runs` lists); `task`, `startedAt` and `command` are kept for that listing.
void noteDiscarded(const RunDir& dir, const DiscardedRun& run);

// The discarded runs noted, oldest first (at most the last 1000).
std::vector<DiscardedRun> discardedRuns();

}  // namespace sandgate::run
