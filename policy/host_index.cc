// HostIndex: building the per-policy lookup structures.
#include "policy/host_index.h"

#include <algorithm>

#include "policy/compiled_rule.h"

namespace sandgate::policy {

HostIndex::HostIndex() = default;
HostIndex::~HostIndex() = default;
HostIndex::HostIndex(HostIndex&&) noexcept = default;
HostIndex& HostIndex::operator=(HostIndex&&) noexcept = default;

std::array<uint8_t, 16> HostIndex::maskKey(const IpAddress& a, int prefix) {
  std::array<uint8_t, 16> k{};
  for (int i = 0; i < prefix / 8; ++i) k[i] = a.bytes[i];
  if (prefix % 8)
    k[prefix / 8] = a.bytes[prefix / 8] & static_cast<uint8_t>(0xff << (8 - prefix % 8));
  return k;
}

void HostIndex::add(const CompiledRule* rule) {
  ++count_;
  if (rule->host) {
    const HostPattern& h = *rule->host;
    switch (h.kind) {
      case HostPattern::Kind::kExact:
        exact_.add(h.text, rule);
        return;
      case HostPattern::Kind::kWildcard:
        suffixes_.add(h.text, rule);
        return;
      case HostPattern::Kind::kRegex:
        regex_.add(h.text, rule);
        return;
    }
  }
  for (const Cidr& c : rule->cidrs) {
    auto b = std::find_if(cidrs_.begin(), cidrs_.end(), [&](const CidrBucket& x) {
      return x.v6 == c.base.v6 && x.prefix == c.prefix;
    });
    if (b == cidrs_.end()) {
      cidrs_.push_back(CidrBucket{c.base.v6, c.prefix, {}});
      b = cidrs_.end() - 1;
    }
    RuleList& list = b->rules[maskKey(c.base, c.prefix)];
    if (list.empty() || list.back() != rule) list.push_back(rule);
  }
  std::stable_sort(cidrs_.begin(), cidrs_.end(),
                   [](const CidrBucket& a, const CidrBucket& b) { return a.prefix > b.prefix; });
}

bool HostIndex::build(std::string* error) {
  exact_.freeze();
  suffixes_.freeze();
  return regex_.build(error);
}

}  // namespace sandgate::policy
