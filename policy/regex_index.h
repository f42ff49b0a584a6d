// RegexIndex: the `re:` host patterns of one policy, grouped by the literal domain they end
// with so that a decision runs only the small RE2::Set of the groups its host can be in (plus
// one set of the regexes with no literal ending). Internal to policy/.
#pragma once

#include <re2/set.h>

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "policy/name_table.h"

namespace sandgate::policy {

using RuleList = std::vector<const CompiledRule*>;  // in evaluation order

// The domain that every host matched by the anchored regex `re` must end with, after a '.':
// "example.org" for "api[0-9]+\.example\.org" or "(a|b)\.x\.example\.org$". Empty when that
// cannot be shown by a simple, conservative reading (top-level '|', a non-literal ending,
// upper case, ...): such regexes run for every host. When a suffix is returned and `prefixLen`
// is given, re.substr(0, *prefixLen) is the pattern without its literal "\.<suffix>" ending.
std::string regexDomainSuffix(std::string_view re, size_t* prefixLen = nullptr);

class RegexIndex {
 public:
  RegexIndex();
  ~RegexIndex();
  RegexIndex(RegexIndex&&) noexcept;
  RegexIndex& operator=(RegexIndex&&) noexcept;

  void add(const std::string& re, const CompiledRule* rule);
  bool build(std::string* error);
  bool empty() const { return groups_.empty(); }

  // Appends the rules of every regex that matches all of `key.name`, in evaluation order.
  void match(const HostKey& key, RuleList* out) const;

  // For the load-time tie check: the rules of each distinct regex text.
  template <typename F>
  void forEachPattern(F&& f) const {
    for (const auto& g : groups_) {
      for (const auto& rules : g.rules) f(std::span<const CompiledRule* const>(rules));
    }
  }

 private:
  struct Group {
    std::vector<std::string> texts;     // as written
    std::vector<std::string> setTexts;  // as given to the set: without the group's suffix
    std::vector<RuleList> rules;        // parallel to texts (= RE2::Set indices)
    std::unordered_map<std::string, size_t> index;
    std::unique_ptr<RE2::Set> set;
    std::vector<std::unique_ptr<RE2>> fallback;  // used only if the set runs out of memory
  };
  void matchGroup(const Group& g, std::string_view name, RuleList* out) const;

  std::vector<Group> groups_;
  std::unordered_map<std::string, size_t> groupOf_;  // building: suffix ("" = general) -> group
  BasicNameTable<uint32_t> bySuffix_;                // suffix -> group
  int general_ = -1;                                 // group of regexes with no suffix
};

}  // namespace sandgate::policy
