// The budgets of one exchange: the request is admitted against its task's budgets before
// anything goes upstream (budget/meter.h), refused with 429 budget_exceeded (Retry-After until
// its window refills) or 503 budget_unavailable when the counters cannot answer (closed: a
// budget that cannot be counted is not a budget that was met), and settled with the bytes it
// moved when the exchange ends, however it ends.
#pragma once

#include <cstdint>
#include <optional>

#include "budget/meter.h"
#include "proxy/client/client_connection.h"

namespace sandgate::proxy {

class BudgetGate {
 public:
  BudgetGate(ClientConnection& c, RequestLog& log) : c_(c), log_(log) {}
  BudgetGate(const BudgetGate&) = delete;
  BudgetGate& operator=(const BudgetGate&) = delete;
  // Settles what the audit record counted (bytes_up, bytes_down), if settle() was not called.
  ~BudgetGate();

  // Admits the request (announcing `bodyBytes` when its length is known); the refusal when a
  // budget has no room. Nothing is counted for a refused request.
  // `llm`: an LLM call's worst case, reserved on token and spend budgets (llm_gate.h).
  std::optional<Refusal> admit(std::optional<uint64_t> bodyBytes,
                               const budget::LlmCost* llm = nullptr);
  // Replaces an LLM call's reserve with what it cost; before settle().
  void settleLlm(const budget::LlmCost& cost);

  // Settles now, once: called before the exchange's audit line is written, so that a client
  // that has seen the line (or the metrics it feeds) sees the budget with this exchange in it.
  void settle();

 private:
  ClientConnection& c_;
  RequestLog& log_;
  std::optional<budget::Admission> admission_;
};

// The refusal for `over` (task and host from `rec`).
Refusal budgetRefusal(const budget::Exceeded& over, const AuditRecord& rec);

}  // namespace sandgate::proxy
