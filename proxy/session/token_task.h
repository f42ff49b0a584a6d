// The task a verified task token names, as a connection is bound to it: a configured task
// (`sub` names one), whose rules the token's claims may only narrow, or an ad-hoc task (`sub`
// names none and `pol` names a policy of the config), which runs under exactly that policy.
//
// A `sub` that names a configured task is always that task, whatever `pol` says: a `pol` other
// than the task's own policy is refused (token_widens, or token_unknown_policy when the config
// has no such policy), so a token can never give a configured task's name another policy. An
// ad-hoc task has its policy's credentials (and so its scrubbing) and the global `limits:`;
// its admission counts are its own (by name, AdhocTaskStates), its metric series and serve's
// placeholders its policy's (TaskEntry::seriesName()).
//
// A `limits` claim lowers the task's max_connections, max_tunnels or
// new_connections_per_second for the connections the token identifies (a value above the
// task's is token_widens). The counts are still the task's: a token's max_connections: 2
// admits a connection while the task has fewer than 2 on this replica.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/ip.h"
#include "proxy/identity/task_token.h"
#include "proxy/state/snapshot.h"

namespace sandgate::proxy {

struct TokenTask {
  std::string_view reason;  // empty: bound; else a token_reason, for the 407
  std::string detail;       // one sentence, never the token
  // The task the connection binds to: into the snapshot for a configured task, else into `own`
  // (made for this token), which the connection keeps while it uses the task.
  const TaskEntry* task = nullptr;
  std::shared_ptr<const TaskEntry> own;
  // The token's `hosts`, normalised: every request must name one of them (denied_by_token).
  std::optional<std::vector<std::string>> hosts;
  bool ok() const { return reason.empty(); }
};

// What the claims of a verified token (`check.ok()`) identify on `snap`, for a client at `peer`
// (nullopt: unknown, which fails a `src` claim), at Unix time `now`. `proxyUser` is the task
// the Proxy-Authorization user names, which must be `sub`.
// `dryRun`: only judge (the admin API checks a token it mints exactly as a replica will): an
// ad-hoc task gets no admission counts made for it.
TokenTask taskForToken(const Snapshot& snap, const TokenClaims& claims, std::string_view proxyUser,
                       const std::optional<policy::IpAddress>& peer, int64_t now,
                       bool dryRun = false);

}  // namespace sandgate::proxy
