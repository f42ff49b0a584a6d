// `sandgate serve --config F [--threads N] [--idle-spin US] [--drain-delay D] [--ready-file PATH]`:
// argument parsing only.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "config/config.h"
#include "proxy/server/server.h"

namespace sandgate::cli {

namespace {
constexpr int kExitConfigError = 2;

struct ServeArgs {
  std::string config;
  unsigned threads = 0;
  unsigned idleSpinUs = 100;
  std::string drainDelay = "5s";
  std::string readyFile;
};
}  // namespace

void addServeCommand(CLI::App& app, Action* action) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Run the proxy");
  cmd->add_option("--config,-c", args->config, "Configuration file")->required();
  cmd->add_option("--threads", args->threads,
                  "Worker threads (default: the CPUs this process may use: affinity mask and "
                  "cgroup CPU quota, rounded up)");
  cmd->add_option("--idle-spin", args->idleSpinUs,
                  "Microseconds a worker polls for more work before it sleeps; adapts, and stops "
                  "while idle (0: sleep at once)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 10000u));
  cmd->add_option("--drain-delay", args->drainDelay,
                  "On SIGTERM, report not ready on /readyz but keep accepting for this long "
                  "(while a load balancer drops this endpoint; 0: drain at once), then drain")
      ->capture_default_str()
      ->check([](const std::string& v) -> std::string {
        auto d = config::parseDuration(v);
        return d && d->count() <= 3600 ? "" : "a duration of at most 1h, like 5s or 500ms";
      });
  cmd->add_option("--ready-file", args->readyFile,
                  "Write {\"proxy\":ADDR,\"metrics\":ADDR} here once listening");
  cmd->callback([args, action] {
    *action = [args]() -> int {
      proxy::ServerOptions options;
      options.configPath = args->config;
      options.threads = args->threads;
      options.idleSpin = std::chrono::microseconds(args->idleSpinUs);
      options.drainDelay = std::chrono::duration_cast<std::chrono::milliseconds>(
          *config::parseDuration(args->drainDelay));
      if (!args->readyFile.empty()) options.readyFile = args->readyFile;
      options.requireClientListener = true;
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
