// Binding a verified task token to a configured or ad-hoc task (see token_task.h).
#include "proxy/session/token_task.h"

#include <fmt/format.h>

#include "policy/host.h"

namespace sandgate::proxy {

namespace {

TokenTask refused(std::string_view reason, std::string detail) {
  TokenTask out;
  out.reason = reason;
  out.detail = std::move(detail);
  return out;
}

}  // namespace

TokenTask taskForToken(const Snapshot& snap, const TokenClaims& claims, std::string_view proxyUser,
                       const std::optional<policy::IpAddress>& peer, int64_t now, bool dryRun) {
  if (claims.task != proxyUser) {
    return refused(token_reason::kTaskMismatch,
                   "the token is for another task than the proxy user names");
  }
  TokenTask out;
  if (const config::Task* conf = snap.config.findTask(claims.task)) {
    out.task = snap.findTask(claims.task);
    if (!out.task) {
      return refused(token_reason::kUnknownTask,
                     "the token's task (sub) is not in this replica's configuration");
    }
    if (claims.policy && *claims.policy != conf->policy.value) {
      if (!snap.config.policies.count(*claims.policy)) {
        return refused(token_reason::kUnknownPolicy,
                       "the token's policy (pol) is not in this replica's configuration");
      }
      return refused(token_reason::kWidens,
                     fmt::format("the token names policy `{}`, but task {} runs under `{}`",
                                 *claims.policy, out.task->name, conf->policy.value));
    }
  } else if (!claims.policy) {
    return refused(token_reason::kUnknownTask,
                   "the token's task (sub) is not in this replica's configuration, and the "
                   "token names no policy (pol) for an ad-hoc task");
  } else {
    auto it = snap.policyTasks.find(*claims.policy);
    if (it == snap.policyTasks.end() || !snap.adhocStates) {
      return refused(token_reason::kUnknownPolicy,
                     "the token's policy (pol) is not in this replica's configuration");
    }
    // An ad-hoc task: its policy's entry under the token's name, with its own counts.
    auto own = std::make_shared<TaskEntry>(it->second);
    own->name = claims.task;
    if (!dryRun) own->state = snap.adhocStates->get(claims.task, claims.exp, now);
    out.own = std::move(own);
    out.task = out.own.get();
  }
  if (claims.limits) {
    // Lower only: a value above the task's would widen it. The counts stay the task's, so a
    // token's max_connections admits a connection while the task has fewer than that.
    config::EffectiveLimits narrowed = out.task->limits;
    std::string widened;
    auto lower = [&](const auto& claim, auto& limit, std::string_view key) {
      if (!claim) return;
      if (*claim > limit) {
        widened = fmt::format("the token's limits.{} ({}) is above task {}'s ({})", key, *claim,
                              out.task->name, limit);
      }
      limit = *claim;
    };
    lower(claims.limits->maxConnections, narrowed.maxConnections, "max_connections");
    lower(claims.limits->maxTunnels, narrowed.maxTunnels, "max_tunnels");
    lower(claims.limits->newConnectionsPerSecond, narrowed.newConnectionsPerSecond,
          "new_connections_per_second");
    if (!widened.empty()) return refused(token_reason::kWidens, std::move(widened));
    auto own = std::make_shared<TaskEntry>(*out.task);
    own->limits = narrowed;
    out.own = std::move(own);
    out.task = out.own.get();
  }
  if (claims.budgets) {
    auto own = std::make_shared<TaskEntry>(*out.task);
    if (auto widened = narrowBudgets(own->budgets, *claims.budgets)) {
      return refused(token_reason::kWidens, std::move(*widened));
    }
    out.own = std::move(own);
    out.task = out.own.get();
  }
  if (claims.hosts) {
    out.hosts.emplace();
    for (const auto& h : *claims.hosts) {
      auto norm = policy::normalizeHost(h);
      const auto* t = std::get_if<policy::Target>(&norm);
      // A host the policy refuses on both web ports would widen it: the token may only
      // narrow what the task's policy allows.
      bool allowed = false;
      for (uint16_t port : {uint16_t{443}, uint16_t{80}}) {
        if (t && snap.decide(*out.task, policy::Request{*t, port, {}, {}, {}}).allowed()) {
          allowed = true;
        }
      }
      if (!allowed) {
        return refused(token_reason::kWidens,
                       fmt::format("the token's hosts name `{}`, which task {}'s policy does not "
                                   "allow",
                                   h.substr(0, 64), out.task->name));
      }
      out.hosts->push_back(t->name);
    }
  }
  if (claims.src) {
    auto cidr = policy::parseCidr(
        claims.src->find('/') == std::string::npos
            ? *claims.src + (claims.src->find(':') == std::string::npos ? "/32" : "/128")
            : *claims.src);
    if (!cidr || !peer || !cidr->contains(*peer)) {
      return refused(token_reason::kSourceMismatch,
                     "the token may only be used from another client address (src)");
    }
  }
  return out;
}

}  // namespace sandgate::proxy
