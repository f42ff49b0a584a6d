// The traffic of one group of adopted listeners (one sandbox run served by `sandgate serve`),
// summed from the audit records of its connections, so that the launcher's report can say
// what the run did without reading serve's audit log.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "proxy/observe/audit.h"
#include "proxy/observe/traffic.h"

namespace sandgate::proxy {

class ListenerTally {
 public:
  // `run`: the id of the run whose listeners these are (task_env's "run"), or empty.
  explicit ListenerTally(std::string run = {}) : run_(std::move(run)) {}
  const std::string& run() const { return run_; }

  // One audit record of a connection accepted on the group's listeners. Thread-safe.
  void add(const AuditRecord& r);
  // Connections accepted and not yet finished: their records may still come.
  void sessionStarted() { active_.fetch_add(1); }
  void sessionEnded() { active_.fetch_sub(1); }
  int64_t activeSessions() const { return active_.load(); }

  // The sums so far; entries sorted by host, port, kind, verdict, reason.
  TrafficSummary summary() const;

 private:
  using Key = std::tuple<std::string, uint16_t, std::string, std::string, std::string>;
  const std::string run_;
  std::atomic<int64_t> active_{0};
  mutable std::mutex mu_;
  TrafficSummary totals_;                // guarded by mu_ (entries filled by summary())
  std::map<Key, TrafficEntry> entries_;  // guarded by mu_
  std::set<std::string> credentials_;    // guarded by mu_
};

}  // namespace sandgate::proxy
