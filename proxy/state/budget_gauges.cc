// The budget gauges and model labels of a snapshot (see budget_gauges.h).
#include "proxy/state/budget_gauges.h"

#include <chrono>
#include <optional>
#include <tuple>

#include "budget/counter.h"
#include "budget/meter.h"
#include "budget/window.h"
#include "common/unix_time.h"

namespace sandgate::proxy {

std::vector<BudgetGauge> budgetGauges(const Snapshot& snap, int64_t now) {
  std::vector<BudgetGauge> out;
  if (!snap.budgetCounter) return out;
  budget::Counter& counter = *snap.budgetCounter;
  for (const auto& [name, task] : snap.tasks) {
    for (const auto& b : task.budgets) {
      const budget::WindowSpan span = budget::windowAt(b.window, now);
      for (auto [limit, metric] : {std::tuple{b.requests, budget::Metric::kRequests},
                                   std::tuple{b.requestBytes, budget::Metric::kRequestBytes},
                                   std::tuple{b.responseBytes, budget::Metric::kResponseBytes},
                                   std::tuple{b.inputTokens, budget::Metric::kInputTokens},
                                   std::tuple{b.outputTokens, budget::Metric::kOutputTokens},
                                   std::tuple{b.spendMicros, budget::Metric::kSpend}}) {
        if (!limit) continue;
        // peek(): no round trip to a shared store on the scrape's worker thread; what this
        // replica last saw of it (0 when nothing yet in this window).
        const int64_t used =
            counter.peek(budget::counterKey(task.name, b, span.index, metric)).value_or(0);
        const double scale = metric == budget::Metric::kSpend ? 1e-6 : 1.0;
        out.push_back(BudgetGauge{.task = task.name,
                                  .budget = b.name,
                                  .window = std::string(config::windowName(b.window)),
                                  .metric = std::string(budget::metricName(metric)),
                                  .used = static_cast<double>(used) * scale,
                                  .limit = static_cast<double>(*limit) * scale});
      }
    }
  }
  return out;
}

std::set<std::string, std::less<>> llmModelLabels(const config::Config& cfg) {
  std::set<std::string, std::less<>> out;
  auto fromRules = [&](const std::vector<config::Rule>& rules) {
    for (const auto& r : rules) {
      if (!r.llm) continue;
      for (const auto& m : r.llm->models) out.insert(m.value);
    }
  };
  for (const auto& [name, policy] : cfg.policies) fromRules(policy.allow);
  fromRules(cfg.global.allow);
  if (cfg.llm.prices) {
    for (const auto& [model, price] : cfg.llm.prices->models) out.insert(model);
  }
  return out;
}

void observeSnapshot(Metrics& metrics, std::shared_ptr<const Snapshot> snap) {
  metrics.llmModels(llmModelLabels(snap->config));
  metrics.budgetSource([snap = std::move(snap)] { return budgetGauges(*snap, unixNow()); });
}

}  // namespace sandgate::proxy
