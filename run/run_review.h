// The commands that read a finished run's directory: `sandgate runs`, `show`, `diff`, `apply`
// and `discard`. Each prints to stdout (errors to stderr) and returns its exit status.
#pragma once

#include <string>

#include "run/apply_changes.h"

namespace sandgate::run {

// Exit statuses besides 0 and kExitUsage: apply refused (conflicts) or --check found some.
inline constexpr int kExitConflict = 1;

// One line per run under the default directory: id, task, command, start, duration, status,
// changed files.
int listRuns();
// The summary a reviewer reads first: what ran, how it ended, its network activity, the
// changes (every .git path first, flagged ones at the top) and where the files are. Every
// string from the run is escaped, every name quoted (common/terminal_text.h).
int showRun(const std::string& run);
// Prints changes.patch with the control bytes of every line escaped (common/terminal_text.h
// escapeText), so that the content cannot rewrite the reviewer's terminal or pager; `raw`: its
// bytes as they are (for `git apply`; the file itself is changes.patch).
int diffRun(const std::string& run, bool raw);
// Applies the run's changes to its workspace (apply_changes.h); prints what it did.
int applyRun(const ApplyRequest& req);
// Removes the run's directory.
int discardRun(const std::string& run);

}  // namespace sandgate::run
