// The tunnels and intercepted connections that are open now, so that a reload can revoke
// those its configuration no longer allows (issue #24, class 7). A keep-alive request is
// decided against the snapshot current when it starts (session.cc and intercept_session.cc
// refresh theirs); a tunnel has no requests to decide, so a reload re-decides its CONNECT
// (task, host, port) here. One the new policy refuses is shut down once its task's
// limits.revoke_grace is up (at once for 0; decided again then, so a reload that allows it
// again in between keeps it): both its directions end, and its audit line says
// revoked_by_reload.
//
// A tunnel a task token opened carries no Proxy-Authorization after its CONNECT, so the token
// is checked again here (issue #38, item 3): once its exp + tokens.leeway has passed (the
// housekeeping reviews each second once one is due), and after every reload (a removed key,
// a jti in tokens.revoked) or admin revocation. A token refused then ends the tunnel at once,
// without revoke_grace (the README promises that removing a key refuses its tokens at once),
// and its audit line carries the token's reason (token_expired, token_unknown_key, ...).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker/secret.h"
#include "policy/engine.h"
#include "proxy/state/snapshot.h"

namespace sandgate::proxy {

class LiveTunnels {
 public:
  // One open tunnel. Registered by a LiveTunnel for as long as it runs.
  struct Entry {
    int fd = -1;          // the client's socket: shut down to end the tunnel
    int upstreamFd = -1;  // a spliced tunnel's upstream socket: shut down too
    std::string task;
    std::optional<std::string> adhocPolicy;              // an ad-hoc task's policy
    std::optional<std::vector<std::string>> tokenHosts;  // a task token's narrowing
    policy::Target target;
    uint16_t port = 0;
    std::atomic<bool>* revoked = nullptr;  // set when a reload ends it
    std::string* why = nullptr;            // and why (written before `revoked`)
    std::string_view* reason = nullptr;    // a token's reason; empty for revoked_by_reload
    // The task token (a JWT) that identified the tunnel's client, if one did: checked again by
    // every review, and ended at once when refused. tokenDeadline: its exp + leeway.
    std::shared_ptr<const broker::Secret> token;
    int64_t tokenDeadline = INT64_MAX;
    // Set by review(): when a reload first refused it (unset while allowed).
    std::optional<std::chrono::steady_clock::time_point> refusedSince;
  };

  uint64_t add(Entry e);
  void remove(uint64_t id);

  struct Review {
    size_t ended = 0;    // shut down by this review
    size_t waiting = 0;  // refused, and ended when their grace is up
  };
  // Re-decides open tunnels under `snap`: after a reload every one (`dueOnly` false), else
  // only those a reload refused whose grace is up and those whose token's deadline is past
  // `unixNow`. A refused one is ended once its task's revoke_grace (in `snap`; the top level's
  // for a task no longer there) has passed since it was first refused; one that `snap` allows
  // again is kept. A token `snap`'s verifier refuses ends its tunnel at once.
  Review review(const Snapshot& snap, std::chrono::steady_clock::time_point now, bool dueOnly,
                int64_t unixNow);
  // Whether some tunnel waits for its grace to end, or holds a token whose deadline is past
  // `unixNow` (the housekeeping's cue to review).
  bool waiting(int64_t unixNow) const {
    return waiting_.load(std::memory_order_relaxed) > 0 ||
           unixNow > earliestDeadline_.load(std::memory_order_relaxed);
  }
  size_t size() const;

 private:
  mutable std::mutex mu_;
  uint64_t next_ = 1;
  std::atomic<size_t> waiting_{0};
  // The earliest tokenDeadline of the open tunnels (a removed one may leave it early: the next
  // review computes it again).
  std::atomic<int64_t> earliestDeadline_{INT64_MAX};
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace sandgate::proxy
