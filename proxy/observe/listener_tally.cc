// Sums audit records per (host, port, kind, verdict, reason) for one adopted listener group.
#include "proxy/observe/listener_tally.h"

namespace sandgate::proxy {

void ListenerTally::add(const AuditRecord& r) {
  std::lock_guard lock(mu_);
  if (!r.credential.empty()) credentials_.insert(r.credential);  // the name, never the secret
  const std::string verdict(outcomeName(r.verdict));
  auto [it, fresh] = entries_.try_emplace(Key{r.host, r.port, r.kind, verdict, r.reason});
  TrafficEntry& e = it->second;
  if (fresh) {
    e.host = r.host;
    e.port = r.port;
    e.kind = r.kind;
    e.verdict = verdict;
    e.reason = r.reason;
  }
  e.count++;
  e.bytesUp += r.bytesUp;
  e.bytesDown += r.bytesDown;
  if (r.verdict == Outcome::kAllow) {
    totals_.allowed++;
  } else if (r.verdict == Outcome::kDeny) {
    totals_.denied++;
  } else {
    totals_.other++;
  }
  totals_.bytesUp += r.bytesUp;
  totals_.bytesDown += r.bytesDown;
}

TrafficSummary ListenerTally::summary() const {
  std::lock_guard lock(mu_);
  TrafficSummary out = totals_;
  for (const auto& [key, entry] : entries_) out.entries.push_back(entry);
  out.credentials.assign(credentials_.begin(), credentials_.end());
  return out;
}

}  // namespace sandgate::proxy
