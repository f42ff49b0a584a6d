// `sandgate serve --config F [--threads N] [--idle-spin US] [--ready-file PATH]`: argument parsing
// only.
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "proxy/server.h"

namespace sandgate::cli {

namespace {
constexpr int kExitConfigError = 2;

struct ServeArgs {
  std::string config;
  unsigned threads = 0;
  unsigned idleSpinUs = 100;
  std::string readyFile;
};
}  // namespace

void addServeCommand(CLI::App& app, Action* action) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Run the proxy");
  cmd->add_option("--config,-c", args->config, "Configuration file")->required();
  cmd->add_option("--threads", args->threads, "Worker threads (default: one per core)");
  cmd->add_option("--idle-spin", args->idleSpinUs,
                  "Microseconds a worker polls for more work before it sleeps; adapts, and stops "
                  "while idle (0: sleep at once)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 10000u));
  cmd->add_option("--ready-file", args->readyFile,
                  "Write {\"proxy\":ADDR,\"metrics\":ADDR} here once listening");
  cmd->callback([args, action] {
    *action = [args]() -> int {
      spdlog::set_default_logger(spdlog::stderr_color_mt("sandgate"));
      proxy::ServerOptions options;
      options.configPath = args->config;
      options.threads = args->threads;
      options.idleSpin = std::chrono::microseconds(args->idleSpinUs);
      if (!args->readyFile.empty()) options.readyFile = args->readyFile;
      auto server = proxy::Server::create(std::move(options));
      if (!server) {
        for (const auto& e : server.errors()) fmt::print(stderr, "{}\n", e.str());
        return kExitConfigError;
      }
      return server.value()->run();
    };
  });
}

}  // namespace sandgate::cli
