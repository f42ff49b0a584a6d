// An exchange measured against its task's budgets (see budget_gate.h).
#include "proxy/exchange/budget_gate.h"

#include <fmt/format.h>

#include <chrono>

#include "budget/counter.h"
#include "proxy/observe/metrics.h"

namespace sandgate::proxy {

namespace {

int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Spend is counted in millionths of the currency and said as a decimal.
std::string amountText(budget::Metric m, int64_t v) {
  if (m != budget::Metric::kSpend) return std::to_string(v);
  return fmt::format("{}.{:06}", v / 1000000, v % 1000000);
}

}  // namespace

Refusal budgetRefusal(const budget::Exceeded& over, const AuditRecord& rec) {
  const auto& b = *over.budget;
  BudgetAudit note{b.name, std::string(config::windowName(b.window)),
                   std::string(budget::metricName(over.metric)), over.used, over.limit};
  if (over.unavailable) {
    return Refusal{.status = 503,
                   .reason = reason::kBudgetUnavailable,
                   .task = rec.task,
                   .host = rec.host,
                   .rule = b.keyPath,
                   .detail = fmt::format("budget `{}` cannot be counted now, so the request is "
                                         "refused",
                                         b.name),
                   .outcome = Outcome::kError,
                   .budget = std::move(note)};
  }
  std::string when = over.retryAfter > 0 ? fmt::format("; it refills in {} s", over.retryAfter)
                                         : std::string("; it lasts for the run");
  return Refusal{
      .status = 429,
      .reason = reason::kBudgetExceeded,
      .task = rec.task,
      .host = rec.host,
      .rule = b.keyPath,
      .detail = fmt::format("budget `{}` of task {} is used up: {} {} of {} this {}{}", b.name,
                            rec.task, amountText(over.metric, over.used), note.metric,
                            amountText(over.metric, over.limit), note.window, when),
      .retryAfter = over.retryAfter,
      .budget = std::move(note)};
}

std::optional<Refusal> BudgetGate::admit(std::optional<uint64_t> bodyBytes,
                                         const budget::LlmCost* llm) {
  const TaskEntry* task = c_.task;
  if (!task || task->budgets.empty() || !c_.snap->budgetCounter) return std::nullopt;
  budget::Admission admission;
  budget::Counter& counter = *c_.snap->budgetCounter;
  // admit() calls the counter on this thread only: a change here is this request's.
  const uint64_t guessed = counter.failedOpen();
  auto over =
      budget::admit(counter, task->name, task->budgets, unixNow(), bodyBytes, admission, llm);
  // `state.redis` with `fail: open` admitted without counting: audited, never silent.
  if (counter.failedOpen() != guessed) {
    log_.record.budgetFailOpen = true;
    if (c_.metrics) c_.metrics->budgetFailOpen();
  }
  if (over) return budgetRefusal(*over, log_.record);
  admission_ = std::move(admission);
  return std::nullopt;
}

void BudgetGate::settle() {
  if (!admission_) return;
  budget::settle(*c_.snap->budgetCounter, *admission_, log_.record.bytesUp, log_.record.bytesDown);
  admission_.reset();
}

void BudgetGate::settleLlm(const budget::LlmCost& cost) {
  if (admission_) budget::settleLlm(*c_.snap->budgetCounter, *admission_, cost);
}

BudgetGate::~BudgetGate() { settle(); }

}  // namespace sandgate::proxy
