// In-process budget counters (the default, and `sandgate run`'s embedded proxy): one replica
// counts alone. Sharded maps under short mutexes: a request touches a few keys, and two tasks
// rarely share a shard lock. Bounded: expired keys are swept as the map grows, and a map full
// of live keys refuses new ones (kUnavailable) rather than grow without limit, since ad-hoc
// task names come from tokens.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "budget/counter.h"
#include "common/string_hash.h"

namespace sandgate::budget {

class LocalCounter final : public Counter {
 public:
  // `maxKeys`: live keys kept at most (over every shard). `clock`: Unix seconds now, used
  // only to sweep expired keys (tests pass their own).
  explicit LocalCounter(size_t maxKeys = kDefaultMaxKeys, std::function<int64_t()> clock = {});

  TakeResult tryAdd(std::string_view key, int64_t amount, int64_t limit,
                    int64_t expiresAt) override;
  bool add(std::string_view key, int64_t amount, int64_t expiresAt) override;
  std::optional<int64_t> get(std::string_view key) override;
  std::optional<int64_t> peek(std::string_view key) override { return get(key); }

  size_t size() const;  // keys held now, expired or not
  static constexpr size_t kDefaultMaxKeys = 1 << 20;
  static constexpr size_t kShards = 16;

 private:
  struct Entry {
    int64_t value = 0;
    int64_t expiresAt = 0;  // 0: never
  };
  struct Shard {
    mutable std::mutex mu;
    StringMap<Entry> map;  // searched by string_view: no key copy per request
  };
  Shard& shardOf(std::string_view key);
  // The live entry for `key`. With `expiresAt` (a write): made when missing if there is room
  // (after sweeping expired keys), its expiry extended; null when the shard is full. Without
  // (a read): null when missing or expired. With the shard's mutex held.
  Entry* find(Shard& s, std::string_view key, std::optional<int64_t> expiresAt);

  std::array<Shard, kShards> shards_;
  size_t maxPerShard_;
  std::function<int64_t()> clock_;
};

}  // namespace sandgate::budget
