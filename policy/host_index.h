// HostIndex: the rules of one policy indexed by host so that a decision costs a few hash
// lookups and one RE2::Set pass, however many rules there are. Internal to policy/.
//
//   exact names and IP literals  -> flat hash table (NameTable)
//   "*.suffix"                   -> flat hash table of suffixes, probed label by label (longest
//                                   first)
//   "re:..."                     -> RE2::Sets anchored at both ends, grouped by the literal
//                                   domain each regex ends with (RegexIndex)
//   cidrs-only rules             -> one hash map per prefix length, longest prefix first
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "policy/ip.h"
#include "policy/name_table.h"
#include "policy/regex_index.h"

namespace sandgate::policy {

struct CompiledRule;

class HostIndex {
 public:
  HostIndex();
  ~HostIndex();
  HostIndex(HostIndex&&) noexcept;
  HostIndex& operator=(HostIndex&&) noexcept;

  // Adds a rule by its host pattern, or by its cidrs when it has no host. Rules must be added
  // in evaluation order.
  void add(const CompiledRule* rule);
  // Compiles the regex set. Returns false (with `error`) if RE2 refuses the combined set.
  bool build(std::string* error);

  bool empty() const { return count_ == 0; }

  // Rules whose host is exactly `key.name` (a normalised name or canonical address text).
  RuleSpan exact(const HostKey& key) const {
    if (!exact_.mayHaveLabels(key.suffixes + 1)) return {};
    return exact_.find(key.name, key.hash);
  }
  RuleSpan exact(std::string_view name) const { return exact_.find(name); }
  // Rules of every wildcard whose suffix is a proper suffix of the name, longest suffix first.
  // `f(RuleSpan)` returns true to stop.
  template <typename F>
  void forEachWildcard(const HostKey& key, F&& f) const;
  template <typename F>
  void forEachWildcard(std::string_view name, F&& f) const {
    forEachWildcard(HostKey(name), std::forward<F>(f));
  }
  // Appends the rules of every regex that matches all of the name, in evaluation order.
  void matchRegex(const HostKey& key, RuleList* out) const { regex_.match(key, out); }
  void matchRegex(std::string_view name, RuleList* out) const { matchRegex(HostKey(name), out); }
  // Cidrs-only rules containing `a`, per prefix length, longest first; `f(RuleSpan)` returns
  // true to stop.
  template <typename F>
  void forEachCidr(const IpAddress& a, F&& f) const;

  // For the load-time tie check: every group of rules that share one pattern.
  template <typename F>
  void forEachGroup(F&& f) const;

 private:
  struct KeyHash {
    size_t operator()(const std::array<uint8_t, 16>& k) const {
      return std::hash<std::string_view>{}(
          std::string_view(reinterpret_cast<const char*>(k.data()), k.size()));
    }
  };
  struct CidrBucket {
    bool v6 = false;
    int prefix = 0;
    std::unordered_map<std::array<uint8_t, 16>, RuleList, KeyHash> rules;
  };

  static std::array<uint8_t, 16> maskKey(const IpAddress& a, int prefix);

  size_t count_ = 0;
  NameTable exact_;
  NameTable suffixes_;
  RegexIndex regex_;
  std::vector<CidrBucket> cidrs_;  // longest prefix first
};

template <typename F>
void HostIndex::forEachWildcard(const HostKey& key, F&& f) const {
  if (suffixes_.empty()) return;
  for (int i = 0; i < key.suffixes; ++i) {
    if (!suffixes_.mayHaveLabels(key.suffixes - i)) continue;
    RuleSpan rules = suffixes_.find(key.name.substr(key.suffixStart[i]), key.suffixHash[i]);
    if (!rules.empty() && f(rules)) return;
  }
}

template <typename F>
void HostIndex::forEachCidr(const IpAddress& a, F&& f) const {
  for (const auto& b : cidrs_) {
    if (b.v6 != a.v6) continue;
    auto it = b.rules.find(maskKey(a, b.prefix));
    if (it != b.rules.end() && f(RuleSpan(it->second))) return;
  }
}

template <typename F>
void HostIndex::forEachGroup(F&& f) const {
  exact_.forEach([&](std::string_view, RuleSpan rules) { f(rules); });
  suffixes_.forEach([&](std::string_view, RuleSpan rules) { f(rules); });
  regex_.forEachPattern(f);
  for (const auto& b : cidrs_) {
    for (const auto& [k, rules] : b.rules) f(RuleSpan(rules));
  }
}

}  // namespace sandgate::policy
