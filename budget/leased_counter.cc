// Local leases on a shared budget store (see leased_counter.h).
#include "budget/leased_counter.h"

#include <algorithm>
#include <tuple>
#include <vector>

namespace sandgate::budget {

LeasedCounter::LeasedCounter(std::shared_ptr<Counter> inner, Options options, Clock clock)
    : inner_(std::move(inner)),
      options_(options),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })) {
  options_.share = std::max<int64_t>(1, options_.share);
  if (options_.sweepEvery.count() > 0) thread_ = std::thread([this] { sweeper(); });
}

LeasedCounter::~LeasedCounter() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // What this replica holds and never used goes back to the other replicas.
  for (const auto& [key, lease] : leases_) {
    if (lease.remaining > 0) inner_->add(key, -lease.remaining, lease.expiresAt);
  }
}

int64_t LeasedCounter::blockFor(int64_t limit) const {
  return std::max<int64_t>(1, limit / options_.share);
}

bool LeasedCounter::full() const { return leases_.size() + reads_.size() >= options_.maxKeys; }

std::optional<TakeResult> LeasedCounter::fromLease(std::string_view key, int64_t amount,
                                                   int64_t limit) {
  auto it = leases_.find(key);
  if (it == leases_.end() || it->second.limit != limit || it->second.remaining < amount) {
    return std::nullopt;
  }
  Lease& l = it->second;
  l.remaining -= amount;
  l.lastUsed = clock_();
  return TakeResult{TakeResult::Status::kTaken, std::max<int64_t>(0, l.seen - l.remaining)};
}

TakeResult LeasedCounter::takeBlock(std::string_view key, int64_t amount, int64_t limit,
                                    int64_t expiresAt) {
  const int64_t block = blockFor(limit);
  // A lease taken under another limit (a reload changed the budget) is given back first.
  int64_t stale = 0;
  {
    std::lock_guard lock(mu_);
    auto it = leases_.find(key);
    if (it != leases_.end() && it->second.limit != limit) {
      stale = it->second.remaining;
      leases_.erase(it);
    }
  }
  if (stale > 0) inner_->add(key, -stale, expiresAt);

  const uint64_t guessed = inner_->failedOpen();
  const TakeResult r = inner_->tryAdd(key, block, limit, expiresAt);
  // `fail: open` with the store unreachable: a guess, nothing was taken, so nothing is leased.
  if (inner_->failedOpen() != guessed) return r;
  if (r.status == TakeResult::Status::kTaken) {
    int64_t excess = 0;
    int64_t used = 0;
    {
      std::lock_guard lock(mu_);
      Lease& l = leases_.try_emplace(std::string(key)).first->second;
      l.remaining += block - amount;
      l.limit = limit;
      l.seen = r.used;
      l.expiresAt = expiresAt;
      l.lastUsed = clock_();
      // Two threads that found the lease empty at once both took a block: keep one.
      excess = std::max<int64_t>(0, l.remaining - block);
      l.remaining -= excess;
      l.seen -= excess;
      used = std::max<int64_t>(0, l.seen - l.remaining);
      if (auto rd = reads_.find(key); rd != reads_.end()) rd->second.value = l.seen;
    }
    if (excess > 0) inner_->add(key, -excess, expiresAt);
    return TakeResult{TakeResult::Status::kTaken, used};
  }
  // No room for a whole block (or no answer): this take is counted exactly, using what the
  // lease still holds first.
  int64_t have = 0;
  {
    std::lock_guard lock(mu_);
    if (auto r = fromLease(key, amount, limit)) return *r;  // another thread's block
    if (auto it = leases_.find(key); it != leases_.end()) {
      have = it->second.remaining;
      it->second.remaining = 0;
    }
  }
  // The store said how much it holds: a take that cannot fit is refused without asking again.
  if (r.status == TakeResult::Status::kOver && r.used > limit - (amount - have)) {
    std::lock_guard lock(mu_);
    if (auto it = leases_.find(key); it != leases_.end()) it->second.remaining += have;
    return TakeResult{TakeResult::Status::kOver, r.used};
  }
  const TakeResult exact = inner_->tryAdd(key, amount - have, limit, expiresAt);
  if (exact.status != TakeResult::Status::kTaken && have > 0) {
    std::lock_guard lock(mu_);
    if (auto it = leases_.find(key); it != leases_.end()) it->second.remaining += have;
  }
  return exact;
}

TakeResult LeasedCounter::tryAdd(std::string_view key, int64_t amount, int64_t limit,
                                 int64_t expiresAt) {
  if (amount > blockFor(limit)) return inner_->tryAdd(key, amount, limit, expiresAt);
  {
    std::lock_guard lock(mu_);
    if (auto r = fromLease(key, amount, limit)) return *r;
    // Full of leases and reads: counted exactly, without a new lease.
    if (!leases_.contains(key) && full()) return inner_->tryAdd(key, amount, limit, expiresAt);
  }
  return takeBlock(key, amount, limit, expiresAt);
}

std::optional<TakeResult> LeasedCounter::tryAddNow(std::string_view key, int64_t amount,
                                                   int64_t limit, int64_t expiresAt) {
  if (!inner_->waits()) return tryAdd(key, amount, limit, expiresAt);
  if (amount > blockFor(limit)) return std::nullopt;
  std::lock_guard lock(mu_);
  return fromLease(key, amount, limit);
}

bool LeasedCounter::add(std::string_view key, int64_t amount, int64_t expiresAt) {
  if (amount < 0) {
    // A give-back on a key this replica leases: the units stay taken in the store, and the
    // lease hands them out again.
    int64_t excess = 0;
    {
      std::lock_guard lock(mu_);
      auto it = leases_.find(key);
      if (it != leases_.end()) {
        Lease& l = it->second;
        l.remaining += -amount;
        l.lastUsed = clock_();
        excess = std::max<int64_t>(0, l.remaining - blockFor(l.limit));
        l.remaining -= excess;
        l.seen -= excess;
        if (auto rd = reads_.find(key); rd != reads_.end()) rd->second.value = l.seen;
        if (excess == 0) return true;
      }
    }
    if (excess > 0) return inner_->add(key, -excess, expiresAt);
  }
  const bool ok = inner_->add(key, amount, expiresAt);
  if (ok) {
    std::lock_guard lock(mu_);
    if (auto rd = reads_.find(key); rd != reads_.end()) {
      rd->second.value = std::max<int64_t>(0, rd->second.value + amount);
    }
  }
  return ok;
}

std::optional<int64_t> LeasedCounter::get(std::string_view key) {
  const uint64_t guessed = inner_->failedOpen();
  const auto v = inner_->get(key);
  if (!v || inner_->failedOpen() != guessed) return v;
  std::lock_guard lock(mu_);
  if (auto rd = reads_.find(key); rd != reads_.end()) {
    rd->second = Read{*v, clock_()};
  } else if (!full()) {
    reads_.emplace(std::string(key), Read{*v, clock_()});
  }
  return usedOf(key, *v);
}

std::optional<int64_t> LeasedCounter::getNow(std::string_view key) {
  if (!inner_->waits()) return get(key);
  std::lock_guard lock(mu_);
  auto rd = reads_.find(key);
  if (rd == reads_.end() || clock_() - rd->second.at > options_.readFresh) return std::nullopt;
  return usedOf(key, rd->second.value);
}

int64_t LeasedCounter::usedOf(std::string_view key, int64_t stored) const {
  // What this replica holds unused is not used: the others' use and its own.
  auto it = leases_.find(key);
  return std::max<int64_t>(0, stored - (it == leases_.end() ? 0 : it->second.remaining));
}

int64_t LeasedCounter::leased(std::string_view key) {
  std::lock_guard lock(mu_);
  auto it = leases_.find(key);
  return it == leases_.end() ? 0 : it->second.remaining;
}

void LeasedCounter::sweep() {
  std::vector<std::tuple<std::string, int64_t, int64_t>> back;
  {
    std::lock_guard lock(mu_);
    const TimePoint now = clock_();
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (now - it->second.lastUsed < options_.idle) {
        ++it;
        continue;
      }
      if (it->second.remaining > 0) {
        back.emplace_back(it->first, it->second.remaining, it->second.expiresAt);
      }
      it = leases_.erase(it);
    }
    std::erase_if(reads_, [&](const auto& kv) { return now - kv.second.at > options_.readFresh; });
  }
  for (const auto& [key, amount, expiresAt] : back) inner_->add(key, -amount, expiresAt);
}

void LeasedCounter::sweeper() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.sweepEvery, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    sweep();
    lock.lock();
  }
}

}  // namespace sandgate::budget
