// The `sandgate` binary: subcommand dispatch only.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "common/absolute_names.h"

int main(int argc, char** argv) {
  // First, before any thread: every name this process resolves is looked up as given.
  sandgate::absolute_names::resolveNamesAsGiven();
  CLI::App app{"sandgate: the network boundary of a coding-agent sandbox", "sandgate"};
  app.require_subcommand(1);
  app.set_version_flag("--version", SANDGATE_VERSION);
  sandgate::cli::Action action;
  sandgate::cli::addPolicyCommands(app, &action);
  sandgate::cli::addServeCommand(app, &action);
  sandgate::cli::addCaCommands(app, &action);
  sandgate::cli::addTokenCommands(app, &action);
  sandgate::cli::addRunCommand(app, &action);
  sandgate::cli::addReviewCommands(app, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2 (the documented status for usage and config errors); --help 0.
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return action ? action() : 2;
}
