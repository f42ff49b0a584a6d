// The `sandgate` binary: subcommand dispatch only.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "common/absolute_names.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  // First, before any thread: every name this process resolves is looked up as given.
  sandgate::absolute_names::resolveNamesAsGiven();
  CLI::App app{"sandgate: the network boundary of a coding-agent sandbox", "sandgate"};
  app.require_subcommand(1);
  app.set_version_flag("--version", SANDGATE_VERSION);
  // Every subcommand takes these, before or after its name (fallthrough): its log lines go to
  // stderr at this level and in this format.
  app.fallthrough();
  std::string logLevel, logFormat;
  auto* levelOption = app.add_option(
      "--log-level", logLevel,
      "Log level: trace, debug, info, warn, error or off (default: $SANDGATE_LOG_LEVEL, else "
      "warn for run, info otherwise)");
  auto* formatOption = app.add_option(
      "--log-format", logFormat,
      "Log lines as text or json (one object per line: time, level, message, fields; default: "
      "$SANDGATE_LOG_FORMAT, else text)");
  sandgate::cli::Action action;
  sandgate::cli::addPolicyCommands(app, &action);
  sandgate::cli::addServeCommand(app, &action);
  sandgate::cli::addCaCommands(app, &action);
  sandgate::cli::addTokenCommands(app, &action);
  sandgate::cli::addRunCommand(app, &action);
  sandgate::cli::addReviewCommands(app, &action);
  sandgate::cli::addConnectCommand(app, &action);
  sandgate::cli::addApproveCommand(app, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit 2 (the documented status for usage and config errors); --help 0.
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!action) return 2;
  // `run` logs warnings only by default: its stderr is the command's too, and the proxy's
  // start-up lines would only be noise there.
  const auto subcommands = app.get_subcommands();
  const bool isRun = !subcommands.empty() && subcommands.front()->get_name() == "run";
  auto settings = sandgate::logging::resolve(
      levelOption->count() ? std::optional(logLevel) : std::nullopt,
      formatOption->count() ? std::optional(logFormat) : std::nullopt,
      isRun ? sandgate::logging::Level::kWarn : sandgate::logging::Level::kInfo);
  if (!settings) {
    std::fprintf(stderr, "sandgate: %s\n", settings.errors().front().message.c_str());
    return 2;
  }
  sandgate::logging::install(settings.value());
  return action();
}
