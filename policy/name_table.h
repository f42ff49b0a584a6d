// NameTable: an immutable map from host names (or suffixes) to rule lists, as one flat
// open-addressing array, and HostKey, the hashes of one host that every probe shares.
// Internal to policy/.
//
// std::unordered_map costs a division per lookup and three dependent cache misses (bucket,
// node, heap key); this costs one probe into a flat array and one key comparison, which is
// what keeps a decision on a 10,000-host policy well under a microsecond.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sandgate::policy {

struct CompiledRule;
using RuleSpan = std::span<const CompiledRule* const>;  // in evaluation order

// FNV-1a over the bytes of a name from last to first. Hashing right to left means that one
// pass over a host yields the hash of the host and of every suffix after a '.', so a decision
// hashes its host once however many tables and wildcard suffixes it probes.
inline constexpr uint64_t kHashSeed = 0xcbf29ce484222325ULL;
inline constexpr uint64_t kHashPrime = 0x100000001b3ULL;
inline uint64_t hashName(std::string_view s) {
  uint64_t h = kHashSeed;
  for (size_t i = s.size(); i-- > 0;) h = (h ^ static_cast<unsigned char>(s[i])) * kHashPrime;
  return h;
}

// A host name with its hash and the hashes of its proper suffixes ("b.c" and "c" for "a.b.c"),
// longest first.
struct HostKey {
  explicit HostKey(std::string_view name);

  std::string_view name;
  uint64_t hash = 0;
  int suffixes = 0;  // suffix i (longest first) has `suffixes - i` labels; the name one more
  // Only the first `suffixes` entries are set (deliberately not zero-filled: this is built on
  // every decision). A name of <= 253 bytes has <= 127 labels.
  std::array<uint16_t, 128> suffixStart;
  std::array<uint64_t, 128> suffixHash;
};

// An immutable map from names (or suffixes) to lists of T, as one flat open-addressing array.
template <typename T>
class BasicNameTable {
 public:
  using Span = std::span<const T>;

  // Building: add() any number of times, then freeze() once before the first find().
  void add(const std::string& key, T value) { building_[key].push_back(value); }
  void freeze() {
    size_ = building_.size();
    size_t cap = 8;
    while (cap < size_ * 2) cap <<= 1;  // load factor <= 0.5 keeps probe chains short
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    keys_.clear();
    values_.clear();
    labelMask_ = 0;
    for (const auto& [key, values] : building_) {
      labelMask_ |= labelBit(1 + static_cast<int>(std::count(key.begin(), key.end(), '.')));
      Slot s;
      s.hash = hashName(key);
      s.keyOff = static_cast<uint32_t>(keys_.size());
      s.keyLen = static_cast<uint32_t>(key.size());
      s.valuesOff = static_cast<uint32_t>(values_.size());
      s.valuesLen = static_cast<uint32_t>(values.size());
      keys_ += key;
      values_.insert(values_.end(), values.begin(), values.end());
      uint64_t i = slotOf(s.hash);
      while (slots_[i].valuesLen != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
    building_.clear();
  }

  bool empty() const { return size_ == 0; }
  // False when no key has `labels` labels: a cheap way to skip most probes of a host's suffixes.
  bool mayHaveLabels(int labels) const { return labelMask_ & labelBit(labels); }
  // The values stored under `key`; empty when there are none.
  Span find(std::string_view key) const { return find(key, hashName(key)); }
  // Same, with `h` == hashName(key) already known.
  Span find(std::string_view key, uint64_t h) const {
    if (size_ == 0) return {};
    for (uint64_t i = slotOf(h);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.valuesLen == 0) return {};
      if (s.hash == h && s.keyLen == key.size() &&
          std::string_view(keys_.data() + s.keyOff, s.keyLen) == key) {
        return Span(values_.data() + s.valuesOff, s.valuesLen);
      }
    }
  }
  // Calls f(key, values) for every entry, in no particular order.
  template <typename F>
  void forEach(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.valuesLen) {
        f(std::string_view(keys_.data() + s.keyOff, s.keyLen),
          Span(values_.data() + s.valuesOff, s.valuesLen));
      }
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t keyOff = 0;
    uint32_t keyLen = 0;
    uint32_t valuesOff = 0;
    uint32_t valuesLen = 0;  // 0: empty slot (every entry has at least one value)
  };
  static uint64_t labelBit(int labels) { return uint64_t{1} << (labels < 63 ? labels : 63); }
  // FNV's low bits are weak; mix before masking.
  uint64_t slotOf(uint64_t h) const {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h & mask_;
  }

  std::map<std::string, std::vector<T>> building_;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<T> values_;
  uint64_t mask_ = 0;
  uint64_t labelMask_ = 0;  // bit n: some key has n labels (63: 63 or more)
  size_t size_ = 0;
};

using NameTable = BasicNameTable<const CompiledRule*>;

}  // namespace sandgate::policy
