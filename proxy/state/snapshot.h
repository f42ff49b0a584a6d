// One immutable configuration snapshot: the Config, its compiled policy and what the data
// path derives from them once (token hashes, per-task limits, resolve overrides). Swapped
// atomically on reload; a connection keeps the snapshot it started with.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "policy/engine.h"
#include "policy/ip.h"
#include "proxy/identity/proxy_auth.h"
#include "proxy/state/capture_config.h"
#include "proxy/state/task_limits.h"

namespace sandgate::budget {
class Counter;
}

namespace sandgate::broker {
class SecretStore;
class TaskSecrets;
class PlaceholderSet;
}  // namespace sandgate::broker

namespace sandgate::proxy {

class UpstreamTls;
class TokenVerifier;
struct AdminApiKeys;

struct TaskEntry {
  std::string name;
  config::EffectiveLimits limits;
  std::optional<TokenHash> token;  // absent: the task cannot use token-identified listeners
  std::shared_ptr<TaskState> state;
  // tasks[].admin_groups as gids (resolved when the config has listen.admin): an admin client
  // that is not root must hold one of them to use this task. Absent: no such restriction.
  std::optional<std::vector<gid_t>> adminGids;
  // The credentials the task's policy names (with its includes), sorted: the ones a request of
  // the task can be given, and so the placeholders its sandbox receives.
  std::vector<std::string> credentials;
  // Every configured credential's secrets as scrub forms (not only the task's: another task's
  // key read back from a shared upstream is as much a leak): every response of the task is
  // scrubbed for all of them.
  std::shared_ptr<const broker::TaskSecrets> secrets;
  // Set for an ad-hoc task (a task token's `sub` that names no configured task, with the
  // policy its `pol` names; token_task.h): the engine decides under that policy.
  std::optional<std::string> adhocPolicy;
  // The budgets every request of the task is measured against: the task's own, then its
  // policy's (a task token may lower them or add more; token_task.h). Counted by task name.
  std::vector<config::Budget> budgets;
  // on_unknown: ask: what the policy refuses only for want of a rule is held and asked about
  // (state/questions.h) for at most ask->timeout. Absent: refused at once.
  std::optional<config::Ask> ask;

  // The name of the task's metric series and of serve's placeholders for it: the task's name,
  // or "adhoc:<policy>" for an ad-hoc task, so that the number of series follows the config
  // and not the tokens minted.
  std::string seriesName() const { return adhocPolicy ? "adhoc:" + *adhocPolicy : name; }
};

struct ResolveOverride {
  policy::IpAddress address;
  std::optional<uint16_t> port;  // dial this port instead of the one asked for
};

struct Snapshot {
  uint64_t generation = 0;
  config::Config config;
  std::shared_ptr<const policy::Engine> engine;
  config::EffectiveLimits defaults;  // before a connection's task is known
  std::unordered_map<std::string, TaskEntry> tasks;
  std::unordered_map<std::string, ResolveOverride> resolve;
  CaptureConfig capture;  // transparent.*: what a sandbox handed to this server captures
  // The credentials' current secrets, and the verified TLS contexts intercepted requests
  // go upstream with. Built with the snapshot: a new config brings its own sources.
  std::shared_ptr<const broker::SecretStore> secrets;
  std::shared_ptr<const UpstreamTls> upstreamTls;
  // `tokens:`: the keys task tokens (JWTs) are checked with; null without the section.
  std::shared_ptr<const TokenVerifier> tokens;
  // With `tokens:`, one entry per policy: what an ad-hoc task under it is (its credentials,
  // secrets and the global limits); the task's name and state come from its token.
  std::unordered_map<std::string, TaskEntry> policyTasks;
  std::shared_ptr<AdhocTaskStates> adhocStates;  // the registry's: they survive reloads
  // metrics.admin_api's token hash and mint key; null: the admin API is off (admin_api.h).
  std::shared_ptr<const AdminApiKeys> adminApi;
  // Where budgets are counted: the registry's (in-process counts survive reloads).
  std::shared_ptr<budget::Counter> budgetCounter;

  const TaskEntry* findTask(std::string_view name) const {
    auto it = tasks.find(std::string(name));
    return it == tasks.end() ? nullptr : &it->second;
  }

  // The engine's decision for `task`'s requests (an ad-hoc task's under its policy).
  policy::Decision decide(const TaskEntry& task, const policy::Request& req) const {
    return task.adhocPolicy ? engine->decideUnder(*task.adhocPolicy, req)
                            : engine->decide(task.name, req);
  }
};

// Compiles `cfg` into a snapshot. Errors: policy compile errors, bad token hashes, resolve
// addresses, transparent ranges or admin_groups that name no group. Task states come from
// `registry` so counters survive reloads. Starts no thread: the server calls
// secrets->startRefresh() once it runs (Server::start(), or at once for a reload after that),
// because `sandgate run` builds it before it forks.
Result<std::shared_ptr<const Snapshot>> buildSnapshot(config::Config cfg, TaskRegistry& registry,
                                                      uint64_t generation);

}  // namespace sandgate::proxy
