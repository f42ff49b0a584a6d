// The run's directory, the evidence bundle of one `sandgate run`: where it lies, how it is made
// (0700, never inside the workspace, no link followed) and how files are written in it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/safe_open.h"
#include "run/output_files.h"

namespace sandgate::run {

// Reason tokens of the refusals below.
namespace reason {
inline constexpr std::string_view kRunDirInWorkspace = "run_dir_in_workspace";
inline constexpr std::string_view kRunDirUnusable = "run_dir_unusable";
inline constexpr std::string_view kNoSuchRun = "no_such_run";
}  // namespace reason

// Files of a run's directory.
namespace bundle {
inline constexpr const char* kReport = "report.json";
inline constexpr const char* kAudit = "audit.jsonl";
inline constexpr const char* kStdout = "stdout.log";
inline constexpr const char* kStderr = "stderr.log";
inline constexpr const char* kPolicy = "policy.yaml";  // the config in force (no secret values)
inline constexpr const char* kChanges = "changes.json";
inline constexpr const char* kPatch = "changes.patch";
inline constexpr const char* kExecs = "exec.jsonl";  // every program the sandbox executed
inline constexpr const char* kOverlay = "overlay";   // upper/ and work/ of the workspace overlay
}  // namespace bundle

struct RunDir {
  std::string id;          // the directory's name
  std::string path;        // as the kernel names it
  safe_open::UniqueFd fd;  // O_RDONLY|O_DIRECTORY

  // Creates `name` in the directory (O_EXCL: never an existing file, never through a link) and
  // returns it open for writing.
  Result<safe_open::UniqueFd> create(const std::string& name, mode_t mode = 0600) const;
  // create() and write all of `data`; returns why it failed, or nullopt.
  std::optional<std::string> write(const std::string& name, std::string_view data) const;
  // The whole of `name` (at most `limit` bytes), read without following a link.
  Result<std::string> read(const std::string& name, size_t limit = 64u << 20) const;
};

// Where runs are kept by default: $SANDGATE_RUNS_DIR when set (absolute), else
// /var/lib/sandgate/runs for root, else $XDG_STATE_HOME/sandgate/runs
// ($HOME/.local/state/sandgate/runs). "" when none is known.
std::string defaultRunsDirectory();

// Now, as the run's records write times: "2026-12-04T21:15:00Z".
std::string nowUtc();

// Makes the directory of a new run: `requested` (--run-dir: must not exist yet) or a new
// <defaultRunsDirectory()>/<id>, created 0700 with no link followed, refused when it is or lies
// inside `workspace` (the workload could plant links in what sandgate writes afterwards).
Result<RunDir> createRunDir(const std::optional<std::string>& requested,
                            const WorkspaceId& workspace);

// Opens an earlier run: `run` is a path (it has a '/') or an id under defaultRunsDirectory().
Result<RunDir> openRunDir(const std::string& run);

// The ids under defaultRunsDirectory(), oldest first (ids sort by their start time).
std::vector<std::string> listRunIds();

// Removes the run's directory and everything in it, following no link (a link the workload
// left in its upper layer is removed, never followed). Returns why it failed, or nullopt.
std::optional<std::string> removeRunDir(const RunDir& dir);

}  // namespace sandgate::run
