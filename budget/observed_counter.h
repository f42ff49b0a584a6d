// A shared budget store (state.redis) with a memory of what this replica last saw of each key,
// for the budget gauges: a metrics scrape must not wait on the store (it runs on a worker
// thread) nor count a fail-open answer, so it reads peek() here instead of asking Redis. The
// values are those the store answered to this replica's own admissions (the sum after a take,
// the value a room check read), plus what this replica settled since: they lag what other
// replicas used until this one's next request of that budget.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "budget/counter.h"
#include "common/string_hash.h"

namespace sandgate::budget {

class ObservedCounter final : public Counter {
 public:
  // `maxKeys`: keys remembered at most (past it, keys not yet seen are not remembered: a
  // gauge then reads 0, admission is unaffected). `clock`: Unix seconds now (tests pass theirs).
  explicit ObservedCounter(std::shared_ptr<Counter> inner, size_t maxKeys = kDefaultMaxKeys,
                           std::function<int64_t()> clock = {});

  TakeResult tryAdd(std::string_view key, int64_t amount, int64_t limit,
                    int64_t expiresAt) override;
  bool add(std::string_view key, int64_t amount, int64_t expiresAt) override;
  std::optional<int64_t> get(std::string_view key) override;
  uint64_t failedOpen() const override { return inner_->failedOpen(); }
  // Forwarded: the proxy takes admission off the worker when the store behind waits (Redis).
  bool waits() const override { return inner_->waits(); }
  std::optional<int64_t> peek(std::string_view key) override;
  std::optional<TakeResult> tryAddNow(std::string_view key, int64_t amount, int64_t limit,
                                      int64_t expiresAt) override;
  std::optional<int64_t> getNow(std::string_view key) override;

  const std::shared_ptr<Counter>& inner() const { return inner_; }
  Counter* wraps() const override { return inner_.get(); }
  static constexpr size_t kDefaultMaxKeys = 1 << 16;
  // How long a key without an expiry (a run window, or one only read) is remembered after it
  // was last seen: a day window's keys live a day past their end.
  static constexpr int64_t kForgetAfter = 2 * 86400;

 private:
  struct Seen {
    int64_t value = 0;
    int64_t forgetAt = 0;
  };
  // Records `value` for `key` (a delta when `delta`), unless the answer was a fail-open guess.
  void note(std::string_view key, int64_t value, bool delta, int64_t expiresAt);

  std::shared_ptr<Counter> inner_;
  size_t maxKeys_;
  std::function<int64_t()> clock_;
  std::mutex mu_;
  StringMap<Seen> seen_;  // searched by string_view: no key copy per request
};

}  // namespace sandgate::budget
