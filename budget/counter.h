// The counter interface budgets are counted through: named 64-bit counters that expire, with
// an atomic "add unless over the limit". LocalCounter (local_counter.h) keeps them in this
// process; a shared store (Redis) implements the same calls so that replicas share a budget.
// Nothing here does I/O. An implementation backed by a network store may wait on it in tryAdd()
// and get() (it says so with waits()); the proxy then calls admission off its worker threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sandgate::budget {

// What a budget counts.
enum class Metric {
  kRequests,
  kRequestBytes,
  kResponseBytes,
  kInputTokens,  // LLM usage (budget/llm_usage.h)
  kOutputTokens,
  kSpend,  // millionths of llm.prices.currency (budget/llm_price.h)
};
// "requests", "request_bytes", "response_bytes", "input_tokens", "output_tokens", "spend": the
// config's keys, the audit's and metrics'.
std::string_view metricName(Metric m);

struct TakeResult {
  enum class Status {
    kTaken,        // added; `used` is the value after
    kOver,         // not added: used + amount would pass the limit; `used` is the value found
    kUnavailable,  // the store cannot answer (full, unreachable): the caller decides
  };
  Status status = Status::kTaken;
  int64_t used = 0;
};

class Counter {
 public:
  virtual ~Counter() = default;
  // Atomically adds `amount` (> 0) to `key` unless the sum would pass `limit`. A key not seen
  // yet is 0. `expiresAt` (Unix seconds; 0: never) is when the key may be forgotten.
  virtual TakeResult tryAdd(std::string_view key, int64_t amount, int64_t limit,
                            int64_t expiresAt) = 0;
  // Adds `amount` whatever the limit; negative gives back part of a reserve (a settle below
  // it). The value never goes below 0. False when the store cannot take it.
  virtual bool add(std::string_view key, int64_t amount, int64_t expiresAt) = 0;
  // The value of `key` (0 when unknown); nullopt when the store cannot answer.
  virtual std::optional<int64_t> get(std::string_view key) = 0;
  // How many answers on the calling thread so far were guesses: a shared store that could not
  // be reached and is configured to fail open admits without counting. The proxy compares it
  // before and after admit() (which calls on one thread) to audit such a request. 0 for a
  // store that always counts.
  virtual uint64_t failedOpen() const { return 0; }
  // The value of `key` as this process knows it, without asking anyone (no I/O, never counted
  // as a fail-open answer): exact for an in-process store; for a shared store what this replica
  // last saw (ObservedCounter), nullopt when it has seen nothing of the key. For the budget
  // gauges a metrics scrape reads, never for admission.
  virtual std::optional<int64_t> peek(std::string_view key) {
    (void)key;
    return std::nullopt;
  }
  // True when tryAdd() and get() wait on a round trip to a shared store (Redis): a worker thread
  // that called them would serve none of its other connections meanwhile.
  virtual bool waits() const { return false; }
  // The counter this one wraps (ObservedCounter, LeasedCounter), so that the proxy can find the
  // store beneath; null for a store.
  virtual Counter* wraps() const { return nullptr; }
  // tryAdd() and get() when they can answer without waiting (a store that never waits, or a
  // local lease or fresh read: LeasedCounter); nullopt when only a round trip could, and then
  // nothing was taken. Never a fail-open guess. A counter that wraps another forwards these.
  virtual std::optional<TakeResult> tryAddNow(std::string_view key, int64_t amount, int64_t limit,
                                              int64_t expiresAt) {
    if (waits()) return std::nullopt;
    return tryAdd(key, amount, limit, expiresAt);
  }
  virtual std::optional<int64_t> getNow(std::string_view key) {
    if (waits()) return std::nullopt;
    return get(key);
  }
};

}  // namespace sandgate::budget
