// The evidence bundle of one `sandgate run`, around the sandbox: made before it starts (the
// run's directory, the workspace overlay's layers, the output logs, the audit copy, the policy
// in force), and finished after it (the changes read from the upper layer, the summary the
// report carries).
#pragma once

#include <boost/json/object.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/safe_open.h"
#include "run/capped_log.h"
#include "run/changes.h"
#include "run/output_files.h"
#include "run/output_tee.h"
#include "run/run_dir.h"
#include "run/run_task.h"
#include "sandbox/launcher.h"
#include "sandbox/workspace.h"

namespace sandgate::run {

// Reason tokens of a run that cannot begin (runTask's exit status follows them).
namespace reason {
// The run's directory cannot be made or used (--run-dir, --resume, --from): a usage error.
inline constexpr std::string_view kRunDirectory = "run_directory";
// The workspace is refused (sandbox::openWorkspace) or cannot be identified: a setup failure,
// as when the launcher refuses it.
inline constexpr std::string_view kWorkspace = "workspace";
// Bind mode and a root-owned workspace without --allow-root-workspace: a usage error.
inline constexpr std::string_view kRootWorkspace = "root_workspace";
}  // namespace reason

class RunBundle {
 public:
  // Creates the run's directory (--run-dir or the default), opens the workspace to compare
  // against later, and points `options` at the overlay's layers (overlay mode) and at the
  // output pipes. `policyText`: the config in force ("" when it is serve's).
  // `checked`: the workspace as sandbox::openWorkspace checked it (its descriptor is taken).
  // Every error is about the run's directory (reason::kRunDirectory). An error once the
  // directory exists (an earlier run --resume or --from cannot use, a file that cannot be
  // made) still returns the bundle, with the error in `unprepared`: the directory then gets
  // its report saying the setup failed (finishSetupFailure), never nothing to read.
  static Result<std::unique_ptr<RunBundle>> begin(
      const RunRequest& req, const WorkspaceId& workspace, sandbox::CheckedWorkspace checked,
      const std::string& policyText, sandbox::Options* options, Diagnostics* unprepared);

  const RunDir& dir() const { return dir_; }
  // Appends one audit line to the run's audit.jsonl, bounded (capped_log.h): for
  // EmbeddedOptions::auditCopy. Valid as long as the bundle.
  std::function<void(std::string_view line)> auditCopy();
  // Right after the sandbox is forked (sandbox::StartedCallback): starts the output copies.
  // Without it (the setup failed), finish() reads no changes.
  void started();
  // After the sandbox is gone: waits for the output copies, reads the changes (overlay mode)
  // and writes changes.json and changes.patch. Returns the report's `run` and `changes`
  // fields; problems go to `warnings`. `workspaceCopy`: sandbox::RunResult::workspaceCopy
  // (the overlay fell back to a copy: upper/ holds the whole tree, mode "copy").
  boost::json::object finish(std::vector<std::string>* warnings,
                             const std::string& workspaceCopy = "");

 private:
  // What begin() does once the directory exists.
  Result<void> prepare(const RunRequest& req, const std::string& policyText,
                       sandbox::Options* options);

  RunDir dir_;
  bool ran_ = false;               // started() was called
  safe_open::UniqueFd workspace_;  // O_PATH of the workspace as it was before the run
  std::string workspacePath_;
  std::string mode_;
  std::string startedAt_;
  std::string policySha256_;
  std::optional<uint64_t> diskBytes_;
  std::optional<RunDir> earlier_;     // --resume / --from
  std::string earlierHow_;            // "resumed_from" or "branched_from"
  std::unique_ptr<CappedLog> audit_;  // audit.jsonl
  std::unique_ptr<CappedLog> execs_;  // exec.jsonl
  uint64_t execCount_ = 0;
  std::unique_ptr<OutputTee> out_, err_;
};

}  // namespace sandgate::run
