// What a run changed in its workspace, read from the overlay's upper layer against the
// workspace (the lower layer) after the run: the list (changes.json), the patch a reviewer
// reads and `git apply` accepts (changes.patch), and the summary the report carries.
#pragma once

#include <boost/json/value.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace sandgate::run {

// One side of a change: what the path held before (in the workspace) or after (in the run).
struct FileState {
  std::string type;   // "file", "dir", "symlink", "other" (a FIFO, a socket)
  uint32_t mode = 0;  // permission bits (07777)
  uint64_t size = 0;
  std::string sha256;  // files: of the content; symlinks: of the target text
  std::string target;  // symlinks
};

struct Change {
  enum class Kind { kAdded, kDeleted, kModified, kMode };
  Kind kind = Kind::kAdded;
  std::string path;  // relative to the workspace, '/'-separated
  std::optional<FileState> before, after;
  bool git = false;      // inside a .git directory: reported apart, never in the patch
  bool flagged = false;  // hooks, config, info, alternates of a .git: code or settings git runs
  // Why it is not shown in the patch, when it is not: `apply` then applies it only when
  // --paths names it exactly (apply_changes.h), never for .git or what is not a file.
  std::string note;
};

struct ChangeSet {
  std::vector<Change> changes;  // sorted by path
  // Where the workspace is in a git work tree, its path relative to the tree's top ("" at the
  // top, "sub/dir/" below it); nullopt outside any work tree.
  std::optional<std::string> gitPrefix;
};

const char* kindName(Change::Kind kind);

// The sha256 of `data`, in lower-case hex.
std::string sha256Hex(std::string_view data);

// The state of `name` in the directory `dir` (a link is described, never followed), or nullopt
// when there is nothing of that name.
std::optional<FileState> stateAt(int dir, const std::string& name);

// Files larger than this are a stub in the patch (formatPatch), not their bytes.
inline constexpr uint64_t kMaxPatchFileBytes = 8u << 20;

// Reads the upper layer `upperFd` (a directory) against the workspace `lowerFd` (an O_PATH or
// O_RDONLY directory), opening every entry relative to its directory without following links:
// a whiteout (0/0 character device) is a deletion, an opaque directory (user.overlay.opaque)
// hides everything of the lower directory it does not hold, a copied-up file that equals its
// lower file is no change. `workspacePath` finds the git work tree. `fullCopy`: the upper
// directory is a whole copy of the workspace (the overlay's copy fallback), every directory of
// it as good as opaque: what it lacks was deleted.
Result<ChangeSet> collectChanges(int lowerFd, int upperFd, const std::string& workspacePath,
                                 bool fullCopy = false);

boost::json::value changesToJson(const ChangeSet& set);
Result<ChangeSet> changesFromJson(const std::string& text);

// {added, deleted, modified, mode, git, flagged: [paths], paths: [first 100]} for the report.
boost::json::value changeSummary(const ChangeSet& set);

// The unified diff of the changes outside .git (git's binary patch format for binary files),
// paths relative to the git work tree's top when there is one; made by `git diff --no-index`
// for each file (no config, no external diff, no textconv). `lowerPath`/`upperPath`: the two
// trees, as paths the launcher reads. Nothing is left out unseen: every .git path is named in a
// comment line at the top ("# sandgate: inside .git, ..."), and a change with a note (too
// large, not a file) or one git cannot read (a rootless run's mode 000 file: its note is set
// here, its path and why go to `skipped`) is a comment line with its size and sha256 and, for a
// file, git's stub of a binary change without its bytes, which `git apply` refuses. Comment
// lines start with "# " before a "diff --git" line: `git apply` skips them.
Result<std::string> formatPatch(ChangeSet* set, const std::string& lowerPath,
                                const std::string& upperPath, std::vector<std::string>* skipped);

}  // namespace sandgate::run
