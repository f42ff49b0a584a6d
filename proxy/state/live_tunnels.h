// The tunnels and intercepted connections that are open now, so that a reload can revoke
// those its configuration no longer allows (issue #24, class 7). A keep-alive request is
// decided against the snapshot current when it starts (session.cc and intercept_session.cc
// refresh theirs); a tunnel has no requests to decide, so a reload re-decides its CONNECT
// (task, host, port) here. One the new policy refuses is shut down once its task's
// limits.revoke_grace is up (at once for 0; decided again then, so a reload that allows it
// again in between keeps it): both its directions end, and its audit line says
// revoked_by_reload.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

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
  // only those a reload refused whose grace is up. A refused one is ended once its task's
  // revoke_grace (in `snap`; the top level's for a task no longer there) has passed since it
  // was first refused; one that `snap` allows again is kept.
  Review review(const Snapshot& snap, std::chrono::steady_clock::time_point now, bool dueOnly);
  // Whether some tunnel waits for its grace to end (the housekeeping's cue to review).
  bool waiting() const { return waiting_.load(std::memory_order_relaxed) > 0; }
  size_t size() const;

 private:
  mutable std::mutex mu_;
  uint64_t next_ = 1;
  std::atomic<size_t> waiting_{0};
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace sandgate::proxy
