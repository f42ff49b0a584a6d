// A shared budget store (Redis) seen through local leases, so that the hot path does not wait
// on a round trip for small amounts (issue #41).
//
// - A take of a small amount (at most a lease: limit / kShare, at least 1) is served from a
//   lease this replica holds on the key: a block taken from the store with one atomic take
//   against the limit. The first take of a key, and the one that finds its lease used up, take
//   a new block (one round trip); the takes between answer locally.
// - A take larger than a lease, and every take once the store has no room left for a whole
//   block, is counted exactly in the store (what the lease still holds is used first).
// - A room check (a byte budget without an announced length) answers from a read of the store
//   at most kReadFresh old, plus what this replica added since.
// - A give-back (a refused request's take, a settle below its reserve) on a key with a lease
//   goes into the lease; every other add goes to the store (which batches it).
// - A lease unused for kIdle, and every lease when the counter goes, is given back.
//
// So the replicas together never admit past a limit: every unit a lease hands out was taken
// within the limit in the store. What a lease costs is the other way: units this replica holds
// and has not used count as used for the others, so another replica may be refused up to one
// lease per replica early, for at most kIdle after the holder stops using it. A room check may
// miss what the other replicas moved in the last kReadFresh (on top of the store's own
// batching of settles). The README's "what is approximate" says both.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <string_view>

#include "budget/counter.h"
#include "common/string_hash.h"

namespace sandgate::budget {

class LeasedCounter final : public Counter {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  struct Options {
    int64_t share = kShare;                    // a lease is at most limit / share
    std::chrono::milliseconds idle = kIdle;    // an unused lease is given back after this
    std::chrono::milliseconds readFresh = kReadFresh;
    // How often a thread of its own gives back idle leases; 0: no thread (tests call sweep()).
    std::chrono::milliseconds sweepEvery{0};
    size_t maxKeys = kMaxKeys;  // leases and reads kept at most; past it, takes are exact
  };

  LeasedCounter(std::shared_ptr<Counter> inner, Options options, Clock clock = {});
  ~LeasedCounter() override;  // gives back every lease

  TakeResult tryAdd(std::string_view key, int64_t amount, int64_t limit,
                    int64_t expiresAt) override;
  bool add(std::string_view key, int64_t amount, int64_t expiresAt) override;
  std::optional<int64_t> get(std::string_view key) override;
  std::optional<TakeResult> tryAddNow(std::string_view key, int64_t amount, int64_t limit,
                                      int64_t expiresAt) override;
  std::optional<int64_t> getNow(std::string_view key) override;
  uint64_t failedOpen() const override { return inner_->failedOpen(); }
  bool waits() const override { return inner_->waits(); }

  // Gives back the leases unused for `idle`, and forgets reads older than `readFresh`.
  void sweep();
  // What this replica holds of `key` and has not used (tests, and the README's bound).
  int64_t leased(std::string_view key);
  const std::shared_ptr<Counter>& inner() const { return inner_; }
  Counter* wraps() const override { return inner_.get(); }

  static constexpr int64_t kShare = 32;
  static constexpr std::chrono::milliseconds kIdle{1000};
  static constexpr std::chrono::milliseconds kReadFresh{50};
  static constexpr size_t kMaxKeys = 1 << 16;

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Lease {
    int64_t remaining = 0;  // taken from the store, not yet handed out
    int64_t limit = 0;      // the limit it was taken against (its block: blockFor(limit))
    int64_t seen = 0;       // the store's total after this replica's last take
    int64_t expiresAt = 0;
    TimePoint lastUsed;
  };
  struct Read {
    int64_t value = 0;
    TimePoint at;
  };
  int64_t blockFor(int64_t limit) const;
  // Hands `amount` out of the lease on `key` taken against `limit` (mu_ held); the answer, or
  // nullopt if it has not that much.
  std::optional<TakeResult> fromLease(std::string_view key, int64_t amount, int64_t limit);
  // A new block on `key` from the store (mu_ not held).
  TakeResult takeBlock(std::string_view key, int64_t amount, int64_t limit, int64_t expiresAt);
  bool full() const;  // no room for one more lease or read (mu_ held)
  // The store's total `stored` of `key` less what this replica holds unused (mu_ held).
  int64_t usedOf(std::string_view key, int64_t stored) const;
  void sweeper();

  std::shared_ptr<Counter> inner_;
  Options options_;
  Clock clock_;
  std::mutex mu_;
  StringMap<Lease> leases_;  // searched by string_view: no key copy per request
  StringMap<Read> reads_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sandgate::budget
