// The tunnels and intercepted connections that are open now, so that a reload can revoke
// those its configuration no longer allows (issue #24, class 7). A keep-alive request is
// decided against the snapshot current when it starts (session.cc and intercept_session.cc
// refresh theirs); a tunnel has no requests to decide, so a reload re-decides its CONNECT
// (task, host, port) here, and one the new policy refuses is shut down at once: both its
// directions end, and its audit line says revoked_by_reload.
#pragma once

#include <atomic>
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
  };

  uint64_t add(Entry e);
  void remove(uint64_t id);
  // Re-decides every open tunnel under `snap`, and ends those it refuses. Returns how many.
  size_t revoke(const Snapshot& snap);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace sandgate::proxy
