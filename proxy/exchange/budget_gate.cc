// An exchange measured against its task's budgets (see budget_gate.h).
#include "proxy/exchange/budget_gate.h"

#include <fmt/format.h>

#include <chrono>

#include "budget/counter.h"
#include "common/unix_time.h"
#include "proxy/observe/metrics.h"
#include "proxy/state/redis/waiting_threads.h"

namespace sandgate::proxy {

namespace {

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

BudgetGate::Admitted BudgetGate::run(budget::Counter& counter, const TaskEntry& task,
                                     std::optional<uint64_t> bodyBytes,
                                     const budget::LlmCost* llm) {
  Admitted out;
  // admit() calls the counter on this thread only: a change here is this request's.
  const uint64_t guessed = counter.failedOpen();
  out.over =
      budget::admit(counter, task.name, task.budgets, unixNow(), bodyBytes, out.admission, llm);
  out.guessed = counter.failedOpen() != guessed;
  return out;
}

std::optional<BudgetGate::Admitted> BudgetGate::runNow(budget::Counter& counter,
                                                       const TaskEntry& task,
                                                       std::optional<uint64_t> bodyBytes,
                                                       const budget::LlmCost* llm) {
  Admitted out;
  auto over = budget::admitNow(counter, task.name, task.budgets, unixNow(), bodyBytes,
                               out.admission, llm);
  if (!over) return std::nullopt;
  out.over = std::move(*over);
  return out;
}

std::optional<Refusal> BudgetGate::finish(Admitted admitted) {
  // `state.redis` with `fail: open` admitted without counting: audited, never silent.
  if (admitted.guessed) {
    log_.record.budgetFailOpen = true;
    if (c_.metrics) c_.metrics->budgetFailOpen();
  }
  if (admitted.over) return budgetRefusal(*admitted.over, log_.record);
  admission_ = std::move(admitted.admission);
  return std::nullopt;
}

std::optional<Refusal> BudgetGate::admit(std::optional<uint64_t> bodyBytes,
                                         const budget::LlmCost* llm) {
  const TaskEntry* task = c_.task;
  if (!task || task->budgets.empty() || !c_.snap->budgetCounter) return std::nullopt;
  return finish(run(*c_.snap->budgetCounter, *task, bodyBytes, llm));
}

boost::asio::awaitable<std::optional<Refusal>> BudgetGate::admitAsync(
    std::optional<uint64_t> bodyBytes, const budget::LlmCost* llm) {
  const TaskEntry* task = c_.task;
  if (!task || task->budgets.empty() || !c_.snap->budgetCounter) co_return std::nullopt;
  if (!c_.snap->budgetCounter->waits()) co_return admit(bodyBytes, llm);
  // Most admissions are answered by this replica's leases (budget/leased_counter.h), here.
  if (auto now = runNow(*c_.snap->budgetCounter, *task, bodyBytes, llm)) {
    co_return finish(std::move(*now));
  }
  // The snapshot (and its counter) lives until the admission answers, whatever a reload does.
  std::shared_ptr<const Snapshot> snap = c_.snap;
  std::optional<budget::LlmCost> cost;
  if (llm) cost = *llm;
  // Named, not a temporary of the co_await expression: GCC 12 destroys such temporaries twice.
  auto count = [snap, task, bodyBytes, cost] {
    return run(*snap->budgetCounter, *task, bodyBytes, cost ? &*cost : nullptr);
  };
  auto answer = redis::offWorker<Admitted>(std::move(count));
  Admitted admitted = co_await std::move(answer);
  co_return finish(std::move(admitted));
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
