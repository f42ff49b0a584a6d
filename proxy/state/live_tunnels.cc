// Open tunnels and their revocation by a reload (see live_tunnels.h).
#include "proxy/state/live_tunnels.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>

namespace sandgate::proxy {

uint64_t LiveTunnels::add(Entry e) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_++;
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

}  // namespace

LiveTunnels::Review LiveTunnels::review(const Snapshot& snap,
                                        std::chrono::steady_clock::time_point now, bool dueOnly) {
  std::lock_guard lock(mu_);
  Review out;
  for (auto& [id, e] : entries_) {
    if (e.revoked->load(std::memory_order_acquire)) continue;
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
    *e.why = std::move(*why);
    e.revoked->store(true, std::memory_order_release);
    // The socket stays open (and its descriptor ours) until the tunnel's own code, on its
    // worker thread, has removed this entry: shutting it down from here is safe, and wakes
    // both directions of the tunnel.
    ::shutdown(e.fd, SHUT_RDWR);
    if (e.upstreamFd >= 0) ::shutdown(e.upstreamFd, SHUT_RDWR);
    ++out.ended;
  }
  waiting_.store(out.waiting, std::memory_order_relaxed);
  return out;
}

}  // namespace sandgate::proxy
