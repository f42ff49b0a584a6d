// In-process budget counters (see local_counter.h).
#include "budget/local_counter.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "common/unix_time.h"

namespace sandgate::budget {

namespace {

// Saturating: a hostile amount cannot wrap a counter around to look unused.
int64_t saturatingAdd(int64_t a, int64_t b) {
  if (b > 0 && a > std::numeric_limits<int64_t>::max() - b) {
    return std::numeric_limits<int64_t>::max();
  }
  return std::max<int64_t>(0, a + b);
}

}  // namespace

std::string_view metricName(Metric m) {
  switch (m) {
    case Metric::kRequests:
      return "requests";
    case Metric::kRequestBytes:
      return "request_bytes";
    case Metric::kResponseBytes:
      return "response_bytes";
    case Metric::kInputTokens:
      return "input_tokens";
    case Metric::kOutputTokens:
      return "output_tokens";
    case Metric::kSpend:
      return "spend";
  }
  return "requests";
}

LocalCounter::LocalCounter(size_t maxKeys, std::function<int64_t()> clock)
    : maxPerShard_(std::max<size_t>(1, maxKeys / kShards)),
      clock_(clock ? std::move(clock) : std::function<int64_t()>(unixNow)) {}

LocalCounter::Shard& LocalCounter::shardOf(std::string_view key) {
  return shards_[std::hash<std::string_view>{}(key) % kShards];
}

LocalCounter::Entry* LocalCounter::find(Shard& s, std::string_view key,
                                        std::optional<int64_t> expiresAt) {
  const int64_t now = clock_();
  auto expired = [now](const Entry& e) { return e.expiresAt != 0 && e.expiresAt <= now; };
  auto it = s.map.find(key);
  if (it != s.map.end()) {
    if (!expiresAt) return expired(it->second) ? nullptr : &it->second;
    // A key of a window that has ended starts again from 0 (its window is another key, but a
    // store may be handed the same key again after a clock step).
    if (expired(it->second)) it->second = Entry{0, *expiresAt};
    if (*expiresAt == 0) {
      it->second.expiresAt = 0;
    } else if (it->second.expiresAt != 0 && *expiresAt > it->second.expiresAt) {
      it->second.expiresAt = *expiresAt;
    }
    return &it->second;
  }
  if (!expiresAt) return nullptr;
  if (s.map.size() >= maxPerShard_) {
    std::erase_if(s.map, [&](const auto& kv) { return expired(kv.second); });
    if (s.map.size() >= maxPerShard_) return nullptr;
  }
  return &s.map.emplace(std::string(key), Entry{0, *expiresAt}).first->second;
}

TakeResult LocalCounter::tryAdd(std::string_view key, int64_t amount, int64_t limit,
                                int64_t expiresAt) {
  Shard& s = shardOf(key);
  std::lock_guard lock(s.mu);
  Entry* e = find(s, key, expiresAt);
  if (!e) return {TakeResult::Status::kUnavailable, 0};
  // Compared without overflow: amount may be as large as a client's Content-Length.
  if (amount > 0 && (e->value > limit || amount > limit - e->value)) {
    return {TakeResult::Status::kOver, e->value};
  }
  e->value = saturatingAdd(e->value, amount);
  return {TakeResult::Status::kTaken, e->value};
}

bool LocalCounter::add(std::string_view key, int64_t amount, int64_t expiresAt) {
  Shard& s = shardOf(key);
  std::lock_guard lock(s.mu);
  Entry* e = find(s, key, expiresAt);
  if (!e) return false;
  e->value = saturatingAdd(e->value, amount);
  return true;
}

std::optional<int64_t> LocalCounter::get(std::string_view key) {
  Shard& s = shardOf(key);
  std::lock_guard lock(s.mu);
  Entry* e = find(s, key, std::nullopt);
  if (!e) return 0;
  return e->value;
}

size_t LocalCounter::size() const {
  size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.map.size();
  }
  return n;
}

}  // namespace sandgate::budget
