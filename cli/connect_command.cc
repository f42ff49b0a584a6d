// `sandgate connect HOST PORT`: argument parsing only; the work is in run/proxy_connect.
#include <memory>
#include <string>

#include "cli/commands.h"
#include "run/proxy_connect.h"

extern char** environ;

namespace sandgate::cli {

void addConnectCommand(CLI::App& app, Action* action) {
  struct Args {
    std::string host;
    std::string port;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "connect",
      "Open a CONNECT HOST:PORT through the proxy of HTTPS_PROXY (or https_proxy, ALL_PROXY, "
      "all_proxy; credentials in the URL are sent as Proxy-Authorization) and relay stdin and "
      "stdout through it: an OpenSSH ProxyCommand (`ProxyCommand sandgate connect %h %p`). A "
      "refusal prints sandgate's reason; exit 0 after the relay, 1 refused or failed, 2 usage");
  cmd->add_option("host", args->host, "Host to reach")->required();
  cmd->add_option("port", args->port, "Port to reach")->required();
  cmd->callback([args, action] {
    *action = [args]() -> int {
      std::map<std::string, std::string, std::less<>> env;
      for (char** e = environ; *e != nullptr; ++e) {
        std::string kv = *e;
        auto eq = kv.find('=');
        if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
      }
      return run::connectAndRelay(args->host, args->port, env);
    };
  });
}

}  // namespace sandgate::cli
