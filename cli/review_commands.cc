// `sandgate runs`, `show RUN`, `diff RUN`, `apply RUN`, `discard RUN`: argument parsing only;
// the work is in run/run_review.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "run/run_review.h"

namespace sandgate::cli {

void addReviewCommands(CLI::App& app, Action* action) {
  auto* runs = app.add_subcommand("runs", "List the runs kept in the default run directory");
  runs->callback([action] { *action = [] { return run::listRuns(); }; });

  auto run = std::make_shared<std::string>();
  auto single = [&](const char* name, const char* help, int (*fn)(const std::string&)) {
    auto* cmd = app.add_subcommand(name, help);
    cmd->add_option("run", *run, "A run's id (see sandgate runs) or its directory")->required();
    cmd->callback([run, action, fn] { *action = [run, fn] { return fn(*run); }; });
  };
  single("show", "Print the summary of a run: what ran, its network activity, its changes",
         run::showRun);
  auto raw = std::make_shared<bool>(false);
  auto* diff = app.add_subcommand(
      "diff", "Print a run's changes as a patch, control bytes escaped (git apply accepts it)");
  diff->add_option("run", *run, "A run's id (see sandgate runs) or its directory")->required();
  diff->add_flag("--raw", *raw,
                 "The patch's bytes as they are, control bytes included (for git apply; not for "
                 "a terminal)");
  diff->callback([run, raw, action] { *action = [run, raw] { return run::diffRun(*run, *raw); }; });
  single("discard", "Remove a run's directory (its changes are lost)", run::discardRun);

  auto req = std::make_shared<run::ApplyRequest>();
  auto* apply = app.add_subcommand(
      "apply",
      "Apply a run's changes to its workspace. Refuses, listing them, if files changed since the "
      "run started (exit 1); never follows a link; never applies changes inside .git");
  apply->add_option("run", req->run, "A run's id (see sandgate runs) or its directory")->required();
  apply->add_flag("--check", req->check, "Say what would be done and check for conflicts only");
  apply->add_option("--paths", req->paths,
                    "Apply only the paths matching these globs (workspace-relative; repeatable); "
                    "a change the patch does not show (a large file's stub) only when named "
                    "exactly");
  apply->callback([req, action] { *action = [req] { return run::applyRun(*req); }; });
}

}  // namespace sandgate::cli
