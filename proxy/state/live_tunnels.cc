// Open tunnels and their revocation by a reload (see live_tunnels.h).
#include "proxy/state/live_tunnels.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>

#include "proxy/identity/task_token.h"

namespace sandgate::proxy {

uint64_t LiveTunnels::add(Entry e) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_++;
  if (e.tokenDeadline < earliestDeadline_.load(std::memory_order_relaxed)) {
    earliestDeadline_.store(e.tokenDeadline, std::memory_order_relaxed);
  }
  entries_.emplace(id, std::move(e));
  return id;
}

void LiveTunnels::remove(uint64_t id) {
  std::lock_guard lock(mu_);
  entries_.erase(id);
}

size_t LiveTunnels::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

namespace {

// Why `snap` no longer allows the tunnel, or nullopt when it does.
std::optional<std::string> refusedBy(const Snapshot& snap, const LiveTunnels::Entry& e) {
  const policy::Request req{e.target, e.port, std::nullopt, std::nullopt, std::nullopt};
  policy::Decision d;
  if (e.adhocPolicy) {
    d = snap.engine->decideUnder(*e.adhocPolicy, req);
  } else if (const TaskEntry* task = snap.findTask(e.task)) {
    d = snap.decide(*task, req);
  } else {
    return fmt::format("the task '{}' is no longer in the configuration", e.task);
  }
  if (!d.allowed()) {
    return fmt::format("the policy no longer allows {}:{} ({}{}{})", e.target.name, e.port,
                       d.reason, d.detail.empty() ? "" : ": ", d.detail);
  }
  if (e.tokenHosts &&
      std::find(e.tokenHosts->begin(), e.tokenHosts->end(), e.target.name) == e.tokenHosts->end()) {
    return std::string("the task token does not name this host");
  }
  return std::nullopt;
}

// The reason `snap` refuses the tunnel's token now (and why, in *why), or empty. Without a
// `tokens:` section no task token identifies anyone any more.
std::string_view tokenRefused(const Snapshot& snap, const LiveTunnels::Entry& e, int64_t now,
                              std::string* why) {
  if (!e.token) return {};
  if (!snap.tokens) {
    *why = "the configuration no longer has a tokens: section";
    return token_reason::kUnknownKey;
  }
  // reveal(): the token goes only into the verifier (a hash lookup, then its claims).
  TokenCheck check = snap.tokens->verify(e.token->reveal(), now);
  if (check.ok()) return {};
  *why = std::move(check.detail);
  return check.reason;
}

// Ends the tunnel: its reason (empty: the policy's, revoked_by_reload) and why first, then the
// flag its own code reads.
void end(LiveTunnels::Entry& e, std::string_view reason, std::string why) {
  *e.why = std::move(why);
  *e.reason = reason;
  e.revoked->store(true, std::memory_order_release);
  // The socket stays open (and its descriptor ours) until the tunnel's own code, on its
  // worker thread, has removed this entry: shutting it down from here is safe, and wakes
  // both directions of the tunnel.
  ::shutdown(e.fd, SHUT_RDWR);
  if (e.upstreamFd >= 0) ::shutdown(e.upstreamFd, SHUT_RDWR);
}

}  // namespace

LiveTunnels::Review LiveTunnels::review(const Snapshot& snap,
                                        std::chrono::steady_clock::time_point now, bool dueOnly,
                                        int64_t unixNow) {
  std::lock_guard lock(mu_);
  Review out;
  int64_t earliest = INT64_MAX;
  for (auto& [id, e] : entries_) {
    if (e.revoked->load(std::memory_order_acquire)) continue;
    // The token first: a refused one ends the tunnel at once, whatever the policy says.
    if (e.token && (!dueOnly || unixNow > e.tokenDeadline)) {
      std::string why;
      if (auto reason = tokenRefused(snap, e, unixNow, &why); !reason.empty()) {
        end(e, reason, std::move(why));
        ++out.ended;
        continue;
      }
      // A reload may have changed tokens.leeway; the token's exp is what the verifier read.
      if (snap.tokens) {
        auto claims = decodeToken(e.token->reveal());
        if (claims.ok()) e.tokenDeadline = claims.claims.exp + snap.tokens->leeway();
      }
    }
    earliest = std::min(earliest, e.tokenDeadline);
    const TaskEntry* task = e.adhocPolicy ? nullptr : snap.findTask(e.task);
    const auto grace = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        (task != nullptr ? task->limits : snap.defaults).revokeGrace);
    if (dueOnly && (!e.refusedSince || now - *e.refusedSince < grace)) {
      if (e.refusedSince) ++out.waiting;
      continue;
    }
    auto why = refusedBy(snap, e);
    if (!why) {
      e.refusedSince.reset();
      continue;
    }
    if (!e.refusedSince) e.refusedSince = now;
    if (now - *e.refusedSince < grace) {
      ++out.waiting;
      continue;
    }
    end(e, {}, std::move(*why));  // revoked_by_reload
    ++out.ended;
  }
  waiting_.store(out.waiting, std::memory_order_relaxed);
  earliestDeadline_.store(earliest, std::memory_order_relaxed);
  return out;
}

}  // namespace sandgate::proxy
