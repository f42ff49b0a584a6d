// Building a Snapshot from a loaded Config (see snapshot.h).
#include "proxy/state/snapshot.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <set>

#include "broker/store.h"
#include "broker/task_secrets.h"
#include "budget/leased_counter.h"
#include "budget/observed_counter.h"
#include "proxy/identity/admin_api_keys.h"
#include "proxy/identity/task_token.h"
#include "proxy/net/upstream_tls.h"
#include "proxy/state/admin_groups.h"
#include "proxy/state/api_client.h"
#include "proxy/state/redis/redis_counter.h"

namespace sandgate::proxy {

namespace {

// The credentials named by `policy`'s rules and by the policies it includes (includes are
// acyclic: the config loader refuses cycles; `seen` also guards repeats).
void policyCredentials(const config::Config& cfg, const std::string& policy,
                       std::set<std::string>& seen, std::set<std::string>& out) {
  if (!seen.insert(policy).second) return;
  auto it = cfg.policies.find(policy);
  if (it == cfg.policies.end()) return;
  for (const auto& rule : it->second.allow) {
    if (rule.credential) out.insert(rule.credential->value);
  }
  for (const auto& inc : it->second.include) policyCredentials(cfg, inc.value, seen, out);
}

// The budget counters of `state.redis`, or the in-process ones without it. The password comes
// from the secret store (a credential), never from the config's text.
Result<std::shared_ptr<budget::Counter>> sharedBudgetCounter(const Snapshot& snap,
                                                             TaskRegistry& registry) {
  const config::Config& cfg = snap.config;
  const config::RedisState* redis = cfg.state.redis ? &*cfg.state.redis : nullptr;
  std::shared_ptr<const broker::Secret> password;
  if (redis && redis->password) {
    auto fetch = snap.secrets->get(redis->password->value);
    if (!fetch.ok()) {
      return Diagnostic{
          cfg.file, redis->password->mark.line, redis->password->mark.col, "state.redis.password",
          fmt::format("credential `{}` is unavailable: {}", redis->password->value, fetch.detail)};
    }
    password = fetch.secret;
  }
  const std::string_view pw = password ? password->reveal() : std::string_view{};
  auto shared = registry.sharedCounter(redis, pw, [&]() -> std::shared_ptr<budget::Counter> {
    boost::asio::ssl::context* tls =
        redis->tls ? &snap.upstreamTls->contextFor(std::string_view{}) : nullptr;
    auto link = std::make_shared<redis::Link>(*redis, std::string(pw), tls, snap.upstreamTls);
    // Leased: small takes are answered from blocks this replica holds (no round trip each).
    // Observed: the budget gauges show what this replica last saw without asking Redis.
    budget::LeasedCounter::Options leases;
    leases.sweepEvery = std::chrono::milliseconds(250);
    return std::make_shared<budget::ObservedCounter>(std::make_shared<budget::LeasedCounter>(
        std::make_shared<redis::RedisCounter>(std::move(link), *redis), leases));
  });
  if (!shared) return registry.budgetCounter();
  return shared;
}

}  // namespace

Result<std::shared_ptr<const Snapshot>> buildSnapshot(config::Config cfg, TaskRegistry& registry,
                                                      uint64_t generation) {
  auto snap = std::make_shared<Snapshot>();
  // Compiled from the copy the snapshot keeps, in case the engine refers into it.
  snap->config = std::move(cfg);
  const config::Config& cfgRef = snap->config;
  auto engine = policy::Engine::compile(cfgRef);
  if (!engine) return engine.errors();
  snap->generation = generation;
  snap->engine = std::move(engine.value());
  // What `policy lint` warns about, once per load or reload.
  for (const auto& w : snap->engine->warnings()) spdlog::warn("config: {}", w.str());
  snap->defaults = config::resolveLimits(cfgRef.limits, config::Limits{});
  snap->budgetCounter = registry.budgetCounter();
  Diagnostics errors;
  for (const auto& t : cfgRef.tasks) {
    TaskEntry e;
    e.name = t.name;
    e.limits = config::resolveLimits(cfgRef.limits, t.limits);
    if (t.tokenSha256) {
      e.token = parseTokenHash(*t.tokenSha256);
      if (!e.token) {
        errors.push_back({cfgRef.file, t.mark.line, t.mark.col, "tasks." + t.name + ".token_sha256",
                          "expected 64 hex digits (the SHA-256 of the token)"});
      }
    }
    // Resolved on every load, so that a reload naming a group that does not exist changes
    // nothing. Only serve has an admin socket (an embedded proxy drops listen.admin).
    if (t.adminGroups && cfgRef.listen.admin) {
      std::vector<gid_t> gids;
      for (size_t j = 0; j < t.adminGroups->size(); ++j) {
        auto gid = resolveAdminGroup(cfgRef.file, (*t.adminGroups)[j],
                                     fmt::format("tasks.{}.admin_groups[{}]", t.name, j));
        if (gid) {
          gids.push_back(gid.value());
        } else {
          errors.insert(errors.end(), gid.errors().begin(), gid.errors().end());
        }
      }
      e.adminGids = std::move(gids);
    }
    std::set<std::string> seen, names;
    policyCredentials(cfgRef, t.policy.value, seen, names);
    e.credentials.assign(names.begin(), names.end());
    e.budgets = t.budgets;
    if (t.onUnknown == config::OnUnknown::kAsk) e.ask = t.ask.value_or(config::Ask{});
    if (auto p = cfgRef.policies.find(t.policy.value); p != cfgRef.policies.end()) {
      e.budgets.insert(e.budgets.end(), p->second.budgets.begin(), p->second.budgets.end());
    }
    e.state = registry.get(t.name);
    snap->tasks.emplace(t.name, std::move(e));
  }
  if (cfgRef.tokens) {
    for (const auto& [policyName, policy] : cfgRef.policies) {
      TaskEntry e;
      e.name = policyName;
      e.adhocPolicy = policyName;
      e.limits = snap->defaults;
      std::set<std::string> seen, names;
      policyCredentials(cfgRef, policyName, seen, names);
      e.credentials.assign(names.begin(), names.end());
      e.budgets = policy.budgets;
      snap->policyTasks.emplace(policyName, std::move(e));
    }
    snap->adhocStates = registry.adhoc();
  }
  for (const auto& r : cfgRef.resolve) {
    auto addr = policy::parseIp(r.address);
    if (!addr) {
      errors.push_back({cfgRef.file, r.mark.line, r.mark.col, "resolve." + r.name,
                        fmt::format("'{}' is not an IP address", r.address)});
      continue;
    }
    snap->resolve[r.name] = ResolveOverride{*addr, r.port};
  }
  if (auto capture = captureConfig(cfgRef)) {
    snap->capture = std::move(capture.value());
  } else {
    errors.insert(errors.end(), capture.errors().begin(), capture.errors().end());
  }
  if (!errors.empty()) return errors;
  // Before the store: a github_app source mints its tokens over the snapshot's upstream TLS.
  auto upstreamTls = UpstreamTls::build(cfgRef);
  if (!upstreamTls) return upstreamTls.errors();
  snap->upstreamTls = upstreamTls.value();
  broker::StoreOptions storeOptions;
  storeOptions.startRefresh = false;
  storeOptions.api = std::make_shared<const HttpsApiClient>(snap->upstreamTls, snap->resolve);
  auto secrets =
      broker::SecretStore::open(cfgRef.credentials, cfgRef.file, storeOptions, cfgRef.tasks);
  if (!secrets) return secrets.errors();
  snap->secrets = secrets.value();
  if (auto shared = sharedBudgetCounter(*snap, registry)) {
    snap->budgetCounter = shared.value();
  } else {
    return shared.errors();
  }
  // Every task's responses are scrubbed for every configured secret, not only those its policy
  // names (issue #38, item 5): an upstream two tasks share (a store of keys, a log, an echo)
  // can hand one task the other's key, which never went out on its connections.
  std::vector<std::string> every;
  for (const auto& entry : cfgRef.credentials) every.push_back(entry.first);
  for (auto& [name, task] : snap->tasks) {
    task.secrets =
        std::make_shared<const broker::TaskSecrets>(snap->secrets, cfgRef.credentials, every, name);
  }
  for (auto& [name, task] : snap->policyTasks) {
    task.secrets =
        std::make_shared<const broker::TaskSecrets>(snap->secrets, cfgRef.credentials, every);
  }
  if (cfgRef.tokens) {
    auto tokens = TokenVerifier::load(*cfgRef.tokens, cfgRef.file);
    if (!tokens) return tokens.errors();
    snap->tokens = tokens.value();
  }
  if (cfgRef.metrics.adminApi) {
    auto api = loadAdminApiKeys(cfgRef, snap->tokens.get());
    if (!api) return api.errors();
    snap->adminApi = api.value();
  }
  return std::shared_ptr<const Snapshot>(std::move(snap));
}

}  // namespace sandgate::proxy
