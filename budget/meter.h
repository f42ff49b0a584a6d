// A request measured against a task's budgets: admitted before it goes upstream (each budget
// that counts requests takes one; each byte budget must have room, and a body whose length is
// announced is reserved whole), then settled with what it really moved. A refusal takes
// nothing: what one budget took is given back when another refuses, so a refused request
// never uses up a budget.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "budget/counter.h"
#include "config/config.h"

namespace sandgate::budget {

// Why a request is refused: the first budget that has no room for it.
struct Exceeded {
  const config::Budget* budget = nullptr;  // into the list admit() was given
  Metric metric = Metric::kRequests;
  int64_t used = 0;   // what the window has used (before this request)
  int64_t limit = 0;  // the budget's limit for `metric`
  // Seconds until the window ends and the budget has room again; 0 for a run window (it does
  // not refill, so a client is not told to retry).
  int64_t retryAfter = 0;
  bool unavailable = false;  // the counter could not answer: refused closed, not over budget
};

// What an LLM call may cost at most (reserved when it is admitted: its input bytes as tokens,
// its max output tokens, their price) or did cost (its `usage`, settled when it ends).
struct LlmCost {
  int64_t inputTokens = 0;
  int64_t outputTokens = 0;
  int64_t spendMicros = 0;
};

// What an admitted request holds: the byte keys it settles (with what it reserved on them).
struct Admission {
  struct Held {
    std::string key;
    Metric metric = Metric::kRequestBytes;
    int64_t reserved = 0;
    int64_t expiresAt = 0;
  };
  std::vector<Held> held;
  bool settled = false;
  bool llmSettled = false;
};

// The counter key of `task`'s budget `b` for `metric` in window `index`:
// "sandgate:budget:<task>:<budget>:<window>:<index>:<metric>". Budget names, windows and
// metrics hold no ':', so a task name cannot make two keys meet.
std::string counterKey(std::string_view task, const config::Budget& b, int64_t index,
                       Metric metric);

// Admits one request of `task` at Unix time `now` (see the top of this file). `bodyBytes`: the
// request body's announced length, when it has one. `llm`: the worst case of an LLM call,
// reserved on token and spend budgets (a request that is no LLM call takes nothing from them).
// nullopt with `admission` filled: admitted.
std::optional<Exceeded> admit(Counter& counter, std::string_view task,
                              std::span<const config::Budget> budgets, int64_t now,
                              std::optional<uint64_t> bodyBytes, Admission& admission,
                              const LlmCost* llm = nullptr);

// admit() when every budget can answer without waiting on a shared store (counter.h's
// tryAddNow/getNow: a lease, a fresh read); nullopt when one could not, and then nothing is
// taken (call admit(), off the worker).
std::optional<std::optional<Exceeded>> admitNow(Counter& counter, std::string_view task,
                                                std::span<const config::Budget> budgets,
                                                int64_t now, std::optional<uint64_t> bodyBytes,
                                                Admission& admission,
                                                const LlmCost* llm = nullptr);

// Adds what an admitted request moved (`up`: request body bytes, `down`: response body bytes)
// to its byte budgets, less what admit() reserved. Once per admission; later calls do nothing.
void settle(Counter& counter, Admission& admission, uint64_t up, uint64_t down);

// Replaces an LLM call's reserve on token and spend budgets with what it really cost (its
// usage; the reserve itself when the usage never came). Once per admission.
void settleLlm(Counter& counter, Admission& admission, const LlmCost& cost);

}  // namespace sandgate::budget
