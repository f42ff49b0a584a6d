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
  // Waits here on a counter that waits (Redis): for the SSH broker's session thread, and for
  // HTTP/2 streams (whose admission is not asynchronous yet).
  std::optional<Refusal> admit(std::optional<uint64_t> bodyBytes,
                               const budget::LlmCost* llm = nullptr);
  // The same admission as a completion: with a counter that waits on Redis, the round trips
  // run on the threads that wait on Redis (state/redis/waiting_threads.h) and the coroutine
  // resumes on its own worker, which serves its other connections meanwhile. A local counter
  // answers at once, inline.
  boost::asio::awaitable<std::optional<Refusal>> admitAsync(std::optional<uint64_t> bodyBytes,
                                                            const budget::LlmCost* llm = nullptr);
  // Replaces an LLM call's reserve with what it cost; before settle().
  void settleLlm(const budget::LlmCost& cost);

  // Settles now, once: called before the exchange's audit line is written, so that a client
  // that has seen the line (or the metrics it feeds) sees the budget with this exchange in it.
  void settle();

 private:
  struct Admitted {
    std::optional<budget::Exceeded> over;
    budget::Admission admission;
    bool guessed = false;  // `fail: open` admitted without counting
  };
  // What admit() found, counted by `counter` on the calling thread.
  static Admitted run(budget::Counter& counter, const TaskEntry& task,
                      std::optional<uint64_t> bodyBytes, const budget::LlmCost* llm);
  // The same when `counter` can answer without waiting (a lease, a fresh read); nullopt when
  // a round trip is needed, and then nothing was taken.
  static std::optional<Admitted> runNow(budget::Counter& counter, const TaskEntry& task,
                                        std::optional<uint64_t> bodyBytes,
                                        const budget::LlmCost* llm);
  std::optional<Refusal> finish(Admitted admitted);

  ClientConnection& c_;
  RequestLog& log_;
  std::optional<budget::Admission> admission_;
};

// The refusal for `over` (task and host from `rec`).
Refusal budgetRefusal(const budget::Exceeded& over, const AuditRecord& rec);

}  // namespace sandgate::proxy
