// RegexIndex: literal-suffix grouping of host regexes and the grouped RE2::Set passes.
#include "policy/regex_index.h"

#include <algorithm>

#include "policy/compiled_rule.h"

namespace sandgate::policy {

namespace {

// Whether `re` has a '|' outside any group or character class: then a branch other than the
// last may end anywhere, and no suffix can be derived.
bool hasTopLevelAlternation(std::string_view re) {
  int depth = 0;
  for (size_t i = 0; i < re.size(); ++i) {
    char c = re[i];
    if (c == '\\') {
      ++i;  // the escaped character
    } else if (c == '[') {
      // A class: skip to its closing ']' ("[]a]" and "[^]a]" start with a literal ']').
      size_t j = i + 1;
      if (j < re.size() && re[j] == '^') ++j;
      if (j < re.size() && re[j] == ']') ++j;
      for (; j < re.size() && re[j] != ']'; ++j) {
        if (re[j] == '\\') ++j;
      }
      i = j;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      return true;
    }
  }
  return false;
}

bool isNameChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }

}  // namespace

std::string regexDomainSuffix(std::string_view re, size_t* prefixLen) {
  // Flags like (?i) need no special case: hosts are lower case, and upper-case letters end
  // the tail below. \Q...\E quoting would make "\." a backslash and a dot: refuse it.
  if (re.empty() || hasTopLevelAlternation(re) || re.find("\\Q") != std::string_view::npos) {
    return {};
  }
  size_t end = re.size();
  if (re[end - 1] == '$') {
    if (end >= 2 && re[end - 2] == '\\') return {};  // "\$" is a literal dollar
    --end;
  }
  // Read the literal tail backwards: name characters and "\." only. A quantifier, class,
  // group or other escape ends it. Every character read is required at the end of a match
  // because nothing after it (only the literal tail itself) can be optional.
  std::string tail;
  std::vector<size_t> at;  // where each tail character starts in `re`
  size_t i = end;
  while (i > 0) {
    char c = re[i - 1];
    if (c == '.' && i >= 2 && re[i - 2] == '\\') {
      // "\." unless the backslash is itself escaped ("\\." is a backslash then any char).
      size_t slashes = 0;
      for (size_t k = i - 1; k > 0 && re[k - 1] == '\\'; --k) ++slashes;
      if (slashes % 2 == 0) break;
      tail.push_back('.');
      i -= 2;
      at.push_back(i);
    } else if (isNameChar(c) && !(i >= 2 && re[i - 2] == '\\')) {
      tail.push_back(c);
      --i;
      at.push_back(i);
    } else {
      break;
    }
  }
  std::reverse(tail.begin(), tail.end());
  std::reverse(at.begin(), at.end());
  // Keep the whole labels after the first '.': "xample.org" proves ".org", ".a.org" proves
  // "a.org". The host must then end with "." + suffix.
  size_t dot = tail.find('.');
  if (dot == std::string::npos) return {};
  std::string suffix = tail.substr(dot + 1);
  if (suffix.empty() || suffix.front() == '.' || suffix.back() == '.' ||
      suffix.find("..") != std::string::npos) {
    return {};
  }
  // The tail is a literal at the top level of the pattern, so the pattern is "<prefix>\.<suffix>"
  // and matches a host exactly when the prefix matches the host without ".<suffix>".
  if (prefixLen) *prefixLen = at[dot];
  return suffix;
}

RegexIndex::RegexIndex() = default;
RegexIndex::~RegexIndex() = default;
RegexIndex::RegexIndex(RegexIndex&&) noexcept = default;
RegexIndex& RegexIndex::operator=(RegexIndex&&) noexcept = default;

void RegexIndex::add(const std::string& re, const CompiledRule* rule) {
  size_t prefixLen = 0;
  std::string suffix = regexDomainSuffix(re, &prefixLen);
  auto [git, freshGroup] = groupOf_.try_emplace(suffix, groups_.size());
  if (freshGroup) groups_.emplace_back();
  Group& g = groups_[git->second];
  auto [it, fresh] = g.index.try_emplace(re, g.texts.size());
  if (fresh) {
    g.texts.push_back(re);
    // Grouped regexes run without their literal ending, on the host without it: the DFA
    // then walks only the part of the host that can still differ.
    g.setTexts.push_back(suffix.empty() ? re : re.substr(0, prefixLen));
    g.rules.emplace_back();
  }
  g.rules[it->second].push_back(rule);
}

bool RegexIndex::build(std::string* error) {
  for (const auto& [suffix, group] : groupOf_) {
    if (suffix.empty()) {
      general_ = static_cast<int>(group);
    } else {
      bySuffix_.add(suffix, static_cast<uint32_t>(group));
    }
  }
  bySuffix_.freeze();
  RE2::Options opts;
  opts.set_log_errors(false);
  // Large policies: give the DFA room so that the out-of-memory fallback stays theoretical.
  opts.set_max_mem(64 << 20);
  for (Group& g : groups_) {
    g.set = std::make_unique<RE2::Set>(opts, RE2::ANCHOR_BOTH);
    for (const auto& text : g.setTexts) {
      if (g.set->Add(text, error) < 0) return false;
      g.fallback.push_back(std::make_unique<RE2>(text, opts));
    }
    if (!g.set->Compile()) {
      *error = "the host regular expressions of this policy are too large to compile together";
      return false;
    }
  }
  return true;
}

void RegexIndex::matchGroup(const Group& g, std::string_view name, RuleList* out) const {
  thread_local std::vector<int> hits;  // reused: no allocation per decision
  hits.clear();
  RE2::Set::ErrorInfo info{};
  if (!g.set->Match(name, &hits, &info) && info.kind != RE2::Set::kNoError) {
    // The DFA ran out of memory: answer exactly (and slowly) rather than as if nothing matched,
    // since a regex deny rule that silently stops matching would be a hole.
    hits.clear();
    for (size_t i = 0; i < g.fallback.size(); ++i) {
      if (RE2::FullMatch(name, *g.fallback[i])) hits.push_back(static_cast<int>(i));
    }
  }
  for (int i : hits) out->insert(out->end(), g.rules[i].begin(), g.rules[i].end());
}

void RegexIndex::match(const HostKey& key, RuleList* out) const {
  if (groups_.empty()) return;
  const size_t before = out->size();
  if (!bySuffix_.empty()) {
    for (int i = 0; i < key.suffixes; ++i) {
      if (!bySuffix_.mayHaveLabels(key.suffixes - i)) continue;
      for (uint32_t g : bySuffix_.find(key.name.substr(key.suffixStart[i]), key.suffixHash[i])) {
        matchGroup(groups_[g], key.name.substr(0, key.suffixStart[i] - 1), out);
      }
    }
  }
  if (general_ >= 0) matchGroup(groups_[general_], key.name, out);
  if (out->size() - before > 1) {
    std::sort(out->begin() + static_cast<long>(before), out->end(),
              [](const CompiledRule* a, const CompiledRule* b) { return a->order < b->order; });
  }
}

}  // namespace sandgate::policy
