// The metric families every task's series are added to (TaskMetrics::Families): shared by
// metrics.cc and ssh_metrics.cc, which split TaskMetrics by concern. Private to observe/.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>

#include "proxy/observe/metrics.h"

namespace sandgate::proxy {

struct TaskMetrics::Families {
  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Family<prometheus::Counter>* requests;
  prometheus::Family<prometheus::Gauge>* active;
  prometheus::Family<prometheus::Gauge>* tunnels;
  prometheus::Family<prometheus::Counter>* bytes;
  prometheus::Family<prometheus::Histogram>* latency;
  prometheus::Family<prometheus::Counter>* tunnelEnds;
  prometheus::Family<prometheus::Histogram>* lifetime;
  prometheus::Family<prometheus::Counter>* injections;
  prometheus::Family<prometheus::Counter>* scrubs;
  prometheus::Family<prometheus::Counter>* intercepted;
  prometheus::Family<prometheus::Counter>* leafCache;
  prometheus::Family<prometheus::Counter>* gitRefs;
  prometheus::Family<prometheus::Counter>* budgetFailOpen;
  prometheus::Family<prometheus::Counter>*sshSessions, *sshRefusals, *sshBytes, *sshMismatches;
  prometheus::Family<prometheus::Gauge>* sshActive;
};

}  // namespace sandgate::proxy
