// What this replica last saw of a shared budget store (see observed_counter.h).
#include "budget/observed_counter.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "common/unix_time.h"

namespace sandgate::budget {

ObservedCounter::ObservedCounter(std::shared_ptr<Counter> inner, size_t maxKeys,
                                 std::function<int64_t()> clock)
    : inner_(std::move(inner)),
      maxKeys_(std::max<size_t>(1, maxKeys)),
      clock_(clock ? std::move(clock) : std::function<int64_t()>(unixNow)) {}

void ObservedCounter::note(std::string_view key, int64_t value, bool delta, int64_t expiresAt) {
  const int64_t now = clock_();
  const int64_t forgetAt = std::max(expiresAt, now + kForgetAfter);
  std::lock_guard lock(mu_);
  auto it = seen_.find(key);
  if (it == seen_.end()) {
    // A settle of a key never read here says nothing of its total.
    if (delta) return;
    if (seen_.size() >= maxKeys_) {
      std::erase_if(seen_, [now](const auto& kv) { return kv.second.forgetAt <= now; });
      if (seen_.size() >= maxKeys_) return;
    }
    it = seen_.emplace(std::string(key), Seen{}).first;
  }
  Seen& s = it->second;
  if (delta) {
    const int64_t max = std::numeric_limits<int64_t>::max();
    s.value = value > 0 && s.value > max - value ? max : std::max<int64_t>(0, s.value + value);
  } else {
    s.value = value;
  }
  s.forgetAt = std::max(s.forgetAt, forgetAt);
}

TakeResult ObservedCounter::tryAdd(std::string_view key, int64_t amount, int64_t limit,
                                   int64_t expiresAt) {
  // A fail-open answer (the store unreachable) is a guess of 0, not what the store holds.
  const uint64_t guessed = inner_->failedOpen();
  TakeResult r = inner_->tryAdd(key, amount, limit, expiresAt);
  if (r.status != TakeResult::Status::kUnavailable && inner_->failedOpen() == guessed) {
    note(key, r.used, false, expiresAt);
  }
  return r;
}

bool ObservedCounter::add(std::string_view key, int64_t amount, int64_t expiresAt) {
  const bool ok = inner_->add(key, amount, expiresAt);
  if (ok) note(key, amount, true, expiresAt);
  return ok;
}

std::optional<int64_t> ObservedCounter::get(std::string_view key) {
  const uint64_t guessed = inner_->failedOpen();
  auto v = inner_->get(key);
  if (v && inner_->failedOpen() == guessed) note(key, *v, false, 0);
  return v;
}

std::optional<TakeResult> ObservedCounter::tryAddNow(std::string_view key, int64_t amount,
                                                     int64_t limit, int64_t expiresAt) {
  // An answer without waiting is never a guess.
  auto r = inner_->tryAddNow(key, amount, limit, expiresAt);
  if (r && r->status != TakeResult::Status::kUnavailable) note(key, r->used, false, expiresAt);
  return r;
}

std::optional<int64_t> ObservedCounter::getNow(std::string_view key) {
  auto v = inner_->getNow(key);
  if (v) note(key, *v, false, 0);
  return v;
}

std::optional<int64_t> ObservedCounter::peek(std::string_view key) {
  std::lock_guard lock(mu_);
  auto it = seen_.find(key);
  if (it == seen_.end()) return std::nullopt;
  return it->second.value;
}

}  // namespace sandgate::budget
