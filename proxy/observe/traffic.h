// What a run's listeners carried, summed from their audit records: the launcher's report and
// the admin protocol's `release` answer (listener_tally.h adds them up).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sandgate::proxy {

// The audit records of one (host, port, kind, verdict, reason), summed.
struct TrafficEntry {
  std::string host;
  uint16_t port = 0;
  std::string kind;     // forward | tunnel | refusal
  std::string verdict;  // allow | deny | error | ...
  std::string reason;
  uint64_t count = 0;
  uint64_t bytesUp = 0;    // client → upstream
  uint64_t bytesDown = 0;  // upstream → client
};

struct TrafficSummary {
  uint64_t allowed = 0;  // records with verdict "allow"
  uint64_t denied = 0;   // records with verdict "deny"
  uint64_t other = 0;    // "error" and anything else
  uint64_t bytesUp = 0, bytesDown = 0;
  std::vector<TrafficEntry> entries;     // sorted by host, port, kind, verdict, reason
  std::vector<std::string> credentials;  // names in the audit lines' "credential", sorted
};

}  // namespace sandgate::proxy
