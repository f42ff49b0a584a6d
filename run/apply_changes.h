// `sandgate apply RUN`: puts a run's changes into its workspace, from the run's upper layer,
// after checking that every file it touches still holds what the run started from.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "run/changes.h"

namespace sandgate::run {

namespace reason {
inline constexpr std::string_view kApplyConflict = "apply_conflict";
inline constexpr std::string_view kApplyFailed = "apply_failed";
}  // namespace reason

struct ApplyRequest {
  std::string run;                  // an id or a run directory
  bool check = false;               // --check: say what would be done, change nothing
  // --paths: fnmatch(3) globs on the workspace-relative path; a change not shown in the patch
  // only when named exactly.
  std::vector<std::string> paths;
};

// What apply did (or, with check, would do): one line per path ("added a/b", "deleted c"),
// the conflicts (path: why) and the changes it skipped (.git, not a file, not shown in the
// patch and not named). Paths are quoted for a terminal (common/terminal_text.h quoteName).
// A change the patch does not show (a note: larger than the patch's limit, unreadable to git)
// is applied only when one of --paths is its path exactly: what the patch does not show is
// never applied on a glob's or nobody's say.
struct ApplyOutcome {
  std::vector<std::string> done;
  std::vector<std::string> conflicts;
  std::vector<std::string> skipped;
};

// Every path is opened beneath the workspace with no link followed (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS): a link in the workspace or in the changes can never make apply write
// outside it. Files are written to a temporary name and renamed into place (a link at the
// target is replaced, not followed); setuid, setgid and sticky bits are dropped; a root
// launcher gives new files to the workspace's owner. Refuses (nothing written) if any file to
// touch no longer matches the run's `before` (the conflicts say which).
Result<ApplyOutcome> applyChanges(const ChangeSet& set, int workspaceFd, int upperFd,
                                  const ApplyRequest& req);

}  // namespace sandgate::run
