// The SSH broker's per-task metrics (sandgate_ssh_*, issue #42): sessions, refusals by reason
// token, bytes, upstream host-key mismatches. Label values are the task and reason tokens only,
// never a host, a repository or a key.
#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include "proxy/observe/metrics.h"
#include "proxy/observe/metric_families.h"

namespace sandgate::proxy {

void TaskMetrics::registerSshFamilies(Families& families) {
  auto& registry = *families.registry;
  families.sshSessions =
      &prometheus::BuildCounter()
           .Name("sandgate_ssh_sessions_total")
           .Help("SSH broker sessions started (after the CONNECT's 200), by task")
           .Register(registry);
  families.sshActive = &prometheus::BuildGauge()
                            .Name("sandgate_ssh_sessions_active")
                            .Help("SSH broker sessions open now, by task (on this replica)")
                            .Register(registry);
  families.sshRefusals = &prometheus::BuildCounter()
                              .Name("sandgate_ssh_refusals_total")
                              .Help(
                                  "Requests the SSH broker refused inside sessions, and the "
                                  "reasons that ended sessions, by task and reason")
                              .Register(registry);
  families.sshBytes = &prometheus::BuildCounter()
                           .Name("sandgate_ssh_bytes_total")
                           .Help("Git payload relayed by the SSH broker, by task and direction")
                           .Register(registry);
  families.sshMismatches = &prometheus::BuildCounter()
                                .Name("sandgate_ssh_upstream_host_key_mismatches_total")
                                .Help(
                                    "SSH upstreams whose host key is not one the credential's "
                                    "known_hosts pins, by task")
                                .Register(registry);
}

prometheus::Counter& TaskMetrics::sshCounter(char tag, std::string_view reason) {
  std::string key(1, tag);
  key.append(reason);
  auto it = ssh_.find(key);
  if (it != ssh_.end()) return *it->second;
  prometheus::Labels labels{{"task", name_}};
  prometheus::Family<prometheus::Counter>* family = families_->sshSessions;
  if (tag == 'R') {
    family = families_->sshRefusals;
    labels.emplace("reason", std::string(reason));
  } else if (tag == 'U' || tag == 'D') {
    family = families_->sshBytes;
    labels.emplace("direction", tag == 'U' ? "up" : "down");
  } else if (tag == 'K') {
    family = families_->sshMismatches;
  }
  return *ssh_.emplace(std::move(key), &family->Add(labels)).first->second;
}

void TaskMetrics::sshSessionStarted() {
  std::lock_guard lock(mu_);
  sshCounter('S', {}).Increment();
  if (!sshActive_) {
    // The task's first session makes its counters at 0, so that rate() and increase() see the
    // first bytes and the first mismatch.
    sshActive_ = &families_->sshActive->Add({{"task", name_}});
    sshCounter('U', {});
    sshCounter('D', {});
    sshCounter('K', {});
  }
  sshActive_->Increment();
}

void TaskMetrics::sshSessionEnded() {
  std::lock_guard lock(mu_);
  if (sshActive_) sshActive_->Decrement();
}

void TaskMetrics::sshRefusal(std::string_view reason) {
  std::lock_guard lock(mu_);
  sshCounter('R', sshReason(reason)).Increment();
}

void TaskMetrics::sshBytes(uint64_t up, uint64_t down) {
  std::lock_guard lock(mu_);
  sshCounter('U', {}).Increment(static_cast<double>(up));
  sshCounter('D', {}).Increment(static_cast<double>(down));
}

void TaskMetrics::sshHostKeyMismatch() {
  std::lock_guard lock(mu_);
  sshCounter('K', {}).Increment();
}

void TaskMetrics::removeSshSeries() {
  for (auto& [key, counter] : ssh_) {
    (key[0] == 'S'   ? families_->sshSessions
     : key[0] == 'R' ? families_->sshRefusals
     : key[0] == 'K' ? families_->sshMismatches
                     : families_->sshBytes)
        ->Remove(counter);
  }
  ssh_.clear();
  if (sshActive_) families_->sshActive->Remove(sshActive_);
  sshActive_ = nullptr;
}

}  // namespace sandgate::proxy
