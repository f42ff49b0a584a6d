// `sandgate token issue` and `sandgate token inspect`: argument parsing and output only; the
// work is in proxy/identity/task_token.cc.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "broker/secret.h"
#include "cli/commands.h"
#include "config/config.h"
#include "proxy/identity/task_token.h"

namespace sandgate::cli {

namespace {
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct IssueArgs {
  std::string keyFile, kid, algorithm = "HS256", task, ttl = "1h";
  std::optional<std::string> policy, src, audience, issuer;
  std::vector<std::string> hosts;
  std::optional<uint32_t> maxConnections, maxTunnels;
  std::optional<double> newConnectionsPerSecond;
  bool json = false;
};

struct InspectArgs {
  std::string token;
  std::optional<std::string> config;
};

int64_t nowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<config::TokenKey::Algorithm> algorithmOf(std::string_view name) {
  for (auto a : {config::TokenKey::Algorithm::kHS256, config::TokenKey::Algorithm::kEdDSA,
                 config::TokenKey::Algorithm::kES256}) {
    if (config::algorithmName(a) == name) return a;
  }
  return std::nullopt;
}

int issue(const IssueArgs& a) {
  auto alg = algorithmOf(a.algorithm);
  if (!alg) {
    fmt::print(stderr, "sandgate token issue: --algorithm must be HS256, EdDSA or ES256\n");
    return kExitUsage;
  }
  auto ttl = config::parseDuration(a.ttl);
  if (!ttl || ttl->count() <= 0) {
    fmt::print(stderr, "sandgate token issue: --ttl wants a duration such as 2h or 15m\n");
    return kExitUsage;
  }
  std::ifstream in(a.keyFile, std::ios::binary);
  if (!in) {
    fmt::print(stderr, "sandgate token issue: cannot read {}\n", a.keyFile);
    return kExitFailure;
  }
  std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (*alg == config::TokenKey::Algorithm::kHS256) broker::trimTrailingNewline(key);
  proxy::TokenRequest req;
  req.task = a.task;
  req.policy = a.policy;
  req.ttlSeconds = static_cast<int64_t>(ttl->count());
  req.hosts = a.hosts;
  req.src = a.src;
  req.audience = a.audience;
  req.issuer = a.issuer;
  req.limits = proxy::TokenLimits{a.maxConnections, a.maxTunnels, a.newConnectionsPerSecond};
  const std::string claims = proxy::claimsFor(req, nowSeconds());
  auto token = proxy::mintToken(*alg, a.kid, key, claims);
  broker::wipe(key);
  if (!token) {
    fmt::print(stderr, "sandgate token issue: {}: {}\n", a.keyFile, token.errors().front().message);
    return kExitFailure;
  }
  if (a.json) {
    fmt::print("{{\"token\":\"{}\",\"claims\":{}}}\n", token.value(), claims);
  } else {
    fmt::print("{}\n", token.value());
  }
  return kExitOk;
}

int inspect(const InspectArgs& a) {
  std::string token = a.token;
  if (token == "-") std::getline(std::cin, token);
  auto decoded = proxy::decodeToken(token);
  if (!decoded.ok()) {
    fmt::print(stderr, "sandgate token inspect: {}: {}\n", decoded.reason, decoded.detail);
    return kExitFailure;
  }
  fmt::print("{}\n", proxy::describeClaims(decoded.claims));
  const int64_t now = nowSeconds();
  const int64_t left = decoded.claims.exp - now;
  if (left >= 0) {
    fmt::print("expires in {} s\n", left);
  } else {
    fmt::print("expired {} s ago\n", -left);
  }
  if (!a.config) {
    fmt::print("signature not checked (give --config to check it against the keys)\n");
    return kExitOk;
  }
  auto cfg = config::loadFile(*a.config);
  if (!cfg) {
    for (const auto& e : cfg.errors()) fmt::print(stderr, "{}\n", e.str());
    return kExitUsage;
  }
  if (!cfg->tokens) {
    fmt::print(stderr, "sandgate token inspect: {} has no tokens: section\n", *a.config);
    return kExitUsage;
  }
  auto verifier = proxy::TokenVerifier::load(*cfg->tokens, cfg->file);
  if (!verifier) {
    for (const auto& e : verifier.errors()) fmt::print(stderr, "{}\n", e.str());
    return kExitFailure;
  }
  auto check = verifier.value()->verify(token, now);
  if (!check.ok()) {
    fmt::print("invalid: {}: {}\n", check.reason, check.detail);
    return kExitFailure;
  }
  fmt::print("valid: signed by key {}\n", check.claims.kid);
  return kExitOk;
}

}  // namespace

void addTokenCommands(CLI::App& app, Action* action) {
  auto* token = app.add_subcommand("token", "Mint and inspect task tokens (JWTs for tokens:)");
  token->require_subcommand(1);

  auto ia = std::make_shared<IssueArgs>();
  auto* iss = token->add_subcommand(
      "issue", "Print a task token signed with KEY (the orchestrator's key, never a sandbox's)");
  iss->add_option("--key-file", ia->keyFile,
                  "HS256: the shared key; EdDSA, ES256: a PEM private key")
      ->required();
  iss->add_option("--kid", ia->kid, "The key's id, as in tokens.keys[].id")->required();
  iss->add_option("--algorithm", ia->algorithm, "HS256 (default), EdDSA or ES256");
  iss->add_option("--task", ia->task, "The task the token is for (sub)")->required();
  iss->add_option("--policy", ia->policy, "pol: the task's policy");
  iss->add_option("--ttl", ia->ttl, "How long it is valid (default 1h)");
  iss->add_option("--host", ia->hosts, "Narrow the token to these hosts (repeatable)")
      ->allow_extra_args(false);
  iss->add_option("--src", ia->src, "The client address (IP or CIDR) it must come from");
  iss->add_option("--audience", ia->audience, "aud: the replicas' tokens.audience");
  iss->add_option("--issuer", ia->issuer, "iss: the replicas' tokens.issuer");
  iss->add_option("--max-connections", ia->maxConnections,
                  "limits: lower the task's max_connections for this token")
      ->check(CLI::Range(1u, UINT32_MAX));
  iss->add_option("--max-tunnels", ia->maxTunnels, "limits: lower the task's max_tunnels")
      ->check(CLI::Range(1u, UINT32_MAX));
  iss->add_option("--new-connections-per-second", ia->newConnectionsPerSecond,
                  "limits: lower the task's new_connections_per_second")
      ->check(CLI::PositiveNumber);
  iss->add_flag("--json", ia->json, "Print the token and its claims as JSON");
  iss->callback([ia, action] { *action = [ia] { return issue(*ia); }; });

  auto na = std::make_shared<InspectArgs>();
  auto* ins = token->add_subcommand(
      "inspect", "Show a token's claims and validity (with --config: check it against the keys)");
  ins->add_option("token", na->token, "The token, or - to read it from standard input")->required();
  ins->add_option("--config,-c", na->config, "Check the signature with this config's tokens:");
  ins->callback([na, action] { *action = [na] { return inspect(*na); }; });
}

}  // namespace sandgate::cli
