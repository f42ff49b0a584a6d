// The sandgate_llm_* series of a task and the budget gauges (see metrics.h). Model labels come
// from the config only: a client names any model it likes in its request body, and a label it
// chose would make the series unbounded (and could carry whatever it wanted to a dashboard).
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "proxy/observe/metric_families.h"

namespace sandgate::proxy {

LlmFamilies::LlmFamilies(prometheus::Registry& registry) {
  tokens = &prometheus::BuildCounter()
                .Name("sandgate_llm_tokens_total")
                .Help(
                    "LLM tokens charged, by task, model (a model the config lists or prices, "
                    "else other) and kind (input, output): the usage the upstream reported, "
                    "or the reserve of a call whose usage never came")
                .Register(registry);
  spend = &prometheus::BuildCounter()
               .Name("sandgate_llm_spend_total")
               .Help("LLM spend charged, in llm.prices.currency, by task and model")
               .Register(registry);
  calls = &prometheus::BuildCounter()
               .Name("sandgate_llm_calls_total")
               .Help(
                   "LLM calls that went upstream, by task, model and outcome (ok, no_usage: "
                   "charged at its reserve, upstream_error: an error status, not charged)")
               .Register(registry);
  refusals = &prometheus::BuildCounter()
                  .Name("sandgate_llm_refusals_total")
                  .Help("LLM calls sandgate answered itself, by task and reason")
                  .Register(registry);
  budgetUsed = &prometheus::BuildGauge()
                    .Name("sandgate_budget_used")
                    .Help(
                        "What a configured task has used of a budget in its current window, "
                        "by task, budget, window and metric (spend in llm.prices.currency). "
                        "In-process counters: exact. With state.redis: what this replica last "
                        "saw in Redis (its own admissions and settles), which lags other "
                        "replicas' use until its next request; 0 before it has seen any")
                    .Register(registry);
  budgetLimit = &prometheus::BuildGauge()
                     .Name("sandgate_budget_limit")
                     .Help(
                         "The limit of a configured task's budget, by task, budget, window "
                         "and metric (spend in llm.prices.currency)")
                     .Register(registry);
}

std::shared_ptr<const std::set<std::string, std::less<>>> LlmFamilies::models() const {
  std::lock_guard lock(mu_);
  return models_;
}

void LlmFamilies::setModels(std::set<std::string, std::less<>> models) {
  auto next = std::make_shared<const std::set<std::string, std::less<>>>(std::move(models));
  std::lock_guard lock(mu_);
  models_ = std::move(next);
}

void LlmFamilies::setBudgetSource(std::function<std::vector<BudgetGauge>()> source) {
  std::lock_guard lock(mu_);
  source_ = std::move(source);
}

void LlmFamilies::refreshBudgets() {
  std::function<std::vector<BudgetGauge>()> source;
  {
    std::lock_guard lock(mu_);
    source = source_;
  }
  std::vector<BudgetGauge> gauges;
  if (source) gauges = source();
  std::lock_guard lock(refreshMu_);
  std::map<std::string, std::pair<prometheus::Gauge*, prometheus::Gauge*>> next;
  for (const auto& g : gauges) {
    std::string key = g.task + "|" + g.budget + "|" + g.window + "|" + g.metric;
    auto it = budgetSeries_.find(key);
    std::pair<prometheus::Gauge*, prometheus::Gauge*> series;
    if (it != budgetSeries_.end()) {
      series = it->second;
      budgetSeries_.erase(it);
    } else {
      const prometheus::Labels labels{
          {"task", g.task}, {"budget", g.budget}, {"window", g.window}, {"metric", g.metric}};
      series = {&budgetUsed->Add(labels), &budgetLimit->Add(labels)};
    }
    series.first->Set(g.used);
    series.second->Set(g.limit);
    next.emplace(std::move(key), series);
  }
  // What the source no longer names (a task or budget a reload removed) goes away.
  for (auto& [key, series] : budgetSeries_) {
    budgetUsed->Remove(series.first);
    budgetLimit->Remove(series.second);
  }
  budgetSeries_ = std::move(next);
}

namespace {

prometheus::Counter& llmCounter(std::map<std::string, prometheus::Counter*, std::less<>>& cache,
                                prometheus::Family<prometheus::Counter>& family, char kind,
                                std::string_view model, std::string_view value,
                                prometheus::Labels labels) {
  std::string key;
  key.reserve(model.size() + value.size() + 3);
  key.push_back(kind);
  key.append("|").append(model).append("|").append(value);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(std::move(key), &family.Add(labels)).first;
  return *it->second;
}

}  // namespace

void TaskMetrics::llmCall(std::string_view model, std::string_view outcome, int64_t inputTokens,
                          int64_t outputTokens, int64_t spendMicros) {
  const auto& llm = *families_->llm;
  const auto known = llm.models();
  const std::string_view o = outcome == "ok"               ? "ok"
                             : outcome == "no_usage"       ? "no_usage"
                             : outcome == "upstream_error" ? "upstream_error"
                                                           : kOtherLabel;
  std::lock_guard lock(mu_);
  std::string_view m = kOtherLabel;
  if (known && known->contains(model)) {
    if (auto it = models_.find(model); it != models_.end()) {
      m = *it;
    } else if (models_.size() < kMaxModels) {
      m = *models_.emplace(model).first;
    }
  }
  const std::string task = name_, ms(m);
  auto& in = llmCounter(llm_, *llm.tokens, 't', m, "input",
                        {{"task", task}, {"model", ms}, {"kind", "input"}});
  auto& out = llmCounter(llm_, *llm.tokens, 't', m, "output",
                         {{"task", task}, {"model", ms}, {"kind", "output"}});
  if (inputTokens > 0) in.Increment(static_cast<double>(inputTokens));
  if (outputTokens > 0) out.Increment(static_cast<double>(outputTokens));
  auto& spend = llmCounter(llm_, *llm.spend, 's', m, {}, {{"task", task}, {"model", ms}});
  if (spendMicros > 0) spend.Increment(static_cast<double>(spendMicros) / 1e6);
  llmCounter(llm_, *llm.calls, 'c', m, o,
             {{"task", task}, {"model", ms}, {"outcome", std::string(o)}})
      .Increment();
}

void TaskMetrics::llmRefusal(std::string_view reason) {
  std::lock_guard lock(mu_);
  // Refusal reasons share the task's cap with the other reason labels.
  const std::string_view r = admitLabel(reasons_, reason, kMaxReasons);
  llmCounter(llm_, *families_->llm->refusals, 'r', {}, r,
             {{"task", name_}, {"reason", std::string(r)}})
      .Increment();
}

void TaskMetrics::removeLlmSeries() {
  const auto& llm = *families_->llm;
  for (auto& [key, counter] : llm_) {
    (key[0] == 't'   ? llm.tokens
     : key[0] == 's' ? llm.spend
     : key[0] == 'c' ? llm.calls
                     : llm.refusals)
        ->Remove(counter);
  }
  llm_.clear();
  models_.clear();
}

}  // namespace sandgate::proxy
