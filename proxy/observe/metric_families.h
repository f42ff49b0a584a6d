// Internal to proxy/observe: the Prometheus families every task's series are made in (shared
// by metrics.cc, llm_metrics.cc and ssh_metrics.cc), and the label guards they use.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proxy/observe/metrics.h"

namespace sandgate::proxy {

inline constexpr std::string_view kOtherLabel = "other";

// Whether `v` may be a label value as it is: a token of [a-z0-9_], at most kMaxTokenBytes.
bool isMetricToken(std::string_view v);

// The label value to use for `v`: itself when it is a token already seen or when there is
// room for one more distinct value, else "other". Bounds the series per task no matter what
// a caller passes.
std::string_view admitLabel(std::set<std::string, std::less<>>& seen, std::string_view v,
                            size_t cap);

// The sandgate_llm_* families and the budget gauges, with what they need between scrapes
// (llm_metrics.cc). Shared like the other families: a connection that outlives Metrics still
// counts into valid series.
struct LlmFamilies {
  explicit LlmFamilies(prometheus::Registry& registry);
  prometheus::Family<prometheus::Counter>* tokens;
  prometheus::Family<prometheus::Counter>* spend;
  prometheus::Family<prometheus::Counter>* calls;
  prometheus::Family<prometheus::Counter>* refusals;
  prometheus::Family<prometheus::Gauge>* budgetUsed;
  prometheus::Family<prometheus::Gauge>* budgetLimit;

  // The model names that may be labels (Metrics::llmModels); null: none.
  std::shared_ptr<const std::set<std::string, std::less<>>> models() const;
  void setModels(std::set<std::string, std::less<>> models);
  void setBudgetSource(std::function<std::vector<BudgetGauge>()> source);
  // Calls the budget source and replaces the gauges with its answer (render(), before Collect).
  void refreshBudgets();

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const std::set<std::string, std::less<>>> models_;
  std::function<std::vector<BudgetGauge>()> source_;
  std::mutex refreshMu_;  // one refresh at a time (scrapes may overlap)
  // "task|budget|window|metric" -> (used, limit), under refreshMu_.
  std::map<std::string, std::pair<prometheus::Gauge*, prometheus::Gauge*>> budgetSeries_;
};

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
  std::shared_ptr<LlmFamilies> llm;
};

}  // namespace sandgate::proxy
