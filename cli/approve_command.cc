// `sandgate approve [--config C] [list | allow ID [--once|--run|--always] | deny ID]`: answers
// the questions of on_unknown: ask through serve's admin socket (listen.admin, with its peer
// check). Argument parsing and output only: the protocol is proxy/admin/admin_questions.h.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "config/config.h"
#include "proxy/admin/admin_client.h"

namespace sandgate::cli {

namespace {
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct ApproveArgs {
  std::optional<std::string> config, socket;
  uint64_t id = 0;
  bool once = false, run = false, always = false;
};

// One question on one line, its id first (what `list` prints and `allow`/`deny` confirm).
std::string line(const proxy::QuestionInfo& q) {
  const bool tunnel = q.key.method == "CONNECT";
  return fmt::format("{}\t{}\t{} {}:{}{}\t{}\twaiting {}", q.id, q.key.task, q.key.method,
                     q.key.host, q.key.port, tunnel ? "" : q.key.path, q.reason, q.waiting);
}

// The admin socket: --socket, else the config's listen.admin.
std::optional<std::string> socketPath(const ApproveArgs& a, const char* cmd) {
  if (a.socket) return *a.socket;
  if (!a.config) {
    fmt::print(stderr,
               "sandgate approve {}: needs --config (serve's config, for listen.admin) "
               "or --socket PATH\n",
               cmd);
    return std::nullopt;
  }
  auto cfg = config::loadFile(*a.config);
  if (!cfg) {
    fmt::print(stderr, "sandgate approve {}: {}\n", cmd, cfg.errorText());
    return std::nullopt;
  }
  if (!cfg->listen.admin) {
    fmt::print(stderr,
               "sandgate approve {}: {} has no listen.admin (the admin socket the "
               "questions are answered through)\n",
               cmd, *a.config);
    return std::nullopt;
  }
  return cfg->listen.admin->value;
}

std::unique_ptr<proxy::AdminClient> connect(const ApproveArgs& a, const char* cmd) {
  auto path = socketPath(a, cmd);
  if (!path) return nullptr;
  auto client = proxy::AdminClient::connect(*path, std::chrono::seconds(10));
  if (!client) {
    fmt::print(stderr, "sandgate approve {}: {}\n", cmd, client.errorText());
    return nullptr;
  }
  return std::move(client.value());
}

int list(const ApproveArgs& a) {
  auto client = connect(a, "list");
  if (!client) return kExitUsage;
  auto qs = client->questions();
  if (!qs) {
    fmt::print(stderr, "sandgate approve list: {}\n", qs.errorText());
    return kExitFailure;
  }
  for (const auto& q : *qs) fmt::print("{}\n", line(q));
  return kExitOk;
}

int answer(const ApproveArgs& a, const char* cmd, const std::string& what) {
  auto client = connect(a, cmd);
  if (!client) return kExitUsage;
  auto q = client->answer(a.id, what);
  if (!q) {
    fmt::print(stderr, "sandgate approve {}: {}\n", cmd, q.errorText());
    return kExitFailure;
  }
  fmt::print("{}\t{}\n", line(*q), what == "deny" ? "denied" : "allowed " + what);
  return kExitOk;
}

}  // namespace

void addApproveCommand(CLI::App& app, Action* action) {
  auto args = std::make_shared<ApproveArgs>();
  auto* cmd = app.add_subcommand(
      "approve", "Answer the requests held by on_unknown: ask (serve's admin socket)");
  cmd->add_option("--config,-c", args->config, "serve's config (its listen.admin)");
  cmd->add_option("--socket", args->socket, "the admin socket (instead of the config's)");
  cmd->require_subcommand(1);
  auto* listCmd = cmd->add_subcommand("list", "one pending request a line, its id first");
  listCmd->callback([args, action] { *action = [args] { return list(*args); }; });
  auto* allowCmd = cmd->add_subcommand("allow", "let a pending request through");
  allowCmd->add_option("ID", args->id, "the question's id (from list)")->required();
  auto* once = allowCmd->add_flag("--once", args->once,
                                  "this request and those waiting with it (the default)");
  auto* run = allowCmd->add_flag("--run", args->run, "and the same request again while serve runs");
  auto* always = allowCmd->add_flag(
      "--always", args->always,
      "and write a rule to the task's approvals file (loaded at the next reload)");
  once->excludes(run)->excludes(always);
  run->excludes(always);
  allowCmd->callback([args, action] {
    *action = [args] {
      return answer(*args, "allow", args->always ? "always" : args->run ? "run" : "once");
    };
  });
  auto* denyCmd = cmd->add_subcommand("deny", "refuse a pending request (approval_denied)");
  denyCmd->add_option("ID", args->id, "the question's id (from list)")->required();
  denyCmd->callback([args, action] { *action = [args] { return answer(*args, "deny", "deny"); }; });
}

}  // namespace sandgate::cli
