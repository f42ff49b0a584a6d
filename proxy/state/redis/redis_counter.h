// Budget counters in the shared Redis of `state.redis`, so that every replica serving a task
// counts against one budget (budget/counter.h's interface; meter.h admits and settles through
// it). It lives here, in proxy/state, above both budget/ (the interface) and the RESP link:
// budget/ stays pure, and the proxy chooses this or budget::LocalCounter per snapshot.
//
// - tryAdd (admission: a request, a reserve) is one atomic Lua script per key (EVALSHA; the
//   script is loaded again on NOSCRIPT after a Redis restart), with the key expiring one window
//   after its end (run windows: 30 days after the last write). It waits one round trip: exact
//   across replicas. The snapshot calls it through budget::LeasedCounter, which takes blocks of
//   a limit with it and admits small takes from them without a round trip each.
// - add (settling bytes, giving a refused request's take back) is batched: summed per key in
//   this process and flushed every kFlushEvery by a thread of its own, so the end of an exchange
//   never waits on Redis. A byte budget can therefore be passed by what the replicas settled in
//   the last kFlushEvery (the README's "what is approximate").
// - get (a byte budget's room) is one GET, plus what this process has not flushed yet.
// - takeRate (a task's new connection) is one Lua GCRA per connection: the per-task rate limit
//   of `limits:` shared across replicas.
//
// When the link is down or a reply does not come in time: `fail: closed` answers kUnavailable
// (503 budget_unavailable); `fail: open` admits (used 0), counts it in failedOpen() so the
// gate audits the request, and in the link's metric.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "budget/counter.h"
#include "proxy/state/redis/redis_link.h"

namespace sandgate::proxy::redis {

class RedisCounter final : public budget::Counter {
 public:
  RedisCounter(std::shared_ptr<Link> link, const config::RedisState& cfg,
               std::chrono::milliseconds flushEvery = kFlushEvery);
  ~RedisCounter() override;  // flushes what is pending, once, if the link is up

  budget::TakeResult tryAdd(std::string_view key, int64_t amount, int64_t limit,
                            int64_t expiresAt) override;
  bool add(std::string_view key, int64_t amount, int64_t expiresAt) override;
  std::optional<int64_t> get(std::string_view key) override;
  uint64_t failedOpen() const override;
  // One new connection of `task` against its `limits.new_connections_per_second`, shared by
  // every replica (a Lua GCRA on Redis's clock): kTaken, kOver, or by the fail mode when Redis
  // cannot answer (open: kTaken, counted in failedOpen()). Waits one round trip.
  budget::TakeResult takeRate(std::string_view task, double perSecond);
  bool waits() const override { return true; }

  // Answers admitted by `fail: open` while Redis could not answer (every thread): the metric.
  uint64_t failOpenTotal() const { return failOpenTotal_.load(std::memory_order_relaxed); }
  const std::shared_ptr<Link>& link() const { return link_; }
  // Sends what add() has summed now (tests; the flusher calls it). False if Redis did not take it.
  bool flush();

  static constexpr std::chrono::milliseconds kFlushEvery{50};
  static constexpr size_t kMaxPending = 1 << 16;  // keys summed and not flushed, at most

 private:
  struct Pending {
    int64_t amount = 0;
    int64_t expiresAt = 0;
  };
  // One script call, loading the script again if Redis lost it. nullopt: no answer.
  std::optional<Reply> script(int which, const std::string& key,
                              const std::vector<std::string>& args);
  int64_t expiryFor(int64_t expiresAt) const;
  void openAnswer();  // counts a fail-open answer

  std::shared_ptr<Link> link_;
  std::string prefix_;
  bool failOpen_;
  std::chrono::milliseconds flushEvery_;
  std::atomic<uint64_t> failOpenTotal_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::unordered_map<std::string, Pending> pending_;
  std::thread flusher_;
};

// The Lua scripts and their SHA-1s (exposed for the unit tests).
std::string_view takeScript();
std::string_view addScript();
std::string_view rateScript();
std::string scriptSha(std::string_view script);

}  // namespace sandgate::proxy::redis
