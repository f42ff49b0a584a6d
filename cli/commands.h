// Registration of the `sandgate` subcommands; each lives in its own file under cli/.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace sandgate::cli {

// A subcommand's action: runs after parsing and returns the process exit status.
using Action = std::function<int()>;

// Each adds its subcommand(s) to `app` and stores the action to run in `*action` from the
// subcommand's callback. Argument parsing and dispatch only: the work is in the components.
void addPolicyCommands(CLI::App& app, Action* action);
// `policy learn` and `policy diff`, added to the `policy` subcommand by addPolicyCommands.
void addLearnCommands(CLI::App& policy, Action* action);
void addServeCommand(CLI::App& app, Action* action);
void addCaCommands(CLI::App& app, Action* action);
void addRunCommand(CLI::App& app, Action* action);
void addTokenCommands(CLI::App& app, Action* action);
void addReviewCommands(CLI::App& app, Action* action);
void addConnectCommand(CLI::App& app, Action* action);
void addApproveCommand(CLI::App& app, Action* action);

}  // namespace sandgate::cli
