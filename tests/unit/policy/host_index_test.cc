// Tests for policy/host_index.cc and policy/name_table.cc: lookups by exact name, wildcard
// suffix (longest first, never the apex), regex set (anchored, in rule order) and cidr
// buckets (longest prefix first).
#include "policy/host_index.h"

#include <gtest/gtest.h>

#include <deque>

#include "policy/compiled_rule.h"

namespace sandgate::policy {
namespace {

class PolicyHostIndex : public ::testing::Test {
 protected:
  const CompiledRule* rule(HostPattern::Kind kind, std::string text) {
    CompiledRule& r = rules_.emplace_back();
    r.order = static_cast<int>(rules_.size());
    r.keyPath = "r" + std::to_string(r.order);
    r.host = HostPattern{kind, std::move(text), false};
    return &r;
  }
  const CompiledRule* cidrRule(std::initializer_list<const char*> cidrs) {
    CompiledRule& r = rules_.emplace_back();
    r.order = static_cast<int>(rules_.size());
    r.keyPath = "r" + std::to_string(r.order);
    for (const char* c : cidrs) r.cidrs.push_back(*parseCidr(c));
    return &r;
  }
  static std::vector<std::string> names(RuleSpan rules) {
    std::vector<std::string> out;
    for (const CompiledRule* r : rules) out.push_back(r->keyPath);
    return out;
  }

  std::deque<CompiledRule> rules_;
};

using Names = std::vector<std::string>;

TEST_F(PolicyHostIndex, ExactAndWildcard) {
  HostIndex idx;
  idx.add(rule(HostPattern::Kind::kExact, "api.example.com"));     // r1
  idx.add(rule(HostPattern::Kind::kWildcard, "example.com"));      // r2
  idx.add(rule(HostPattern::Kind::kWildcard, "eu.example.com"));   // r3
  idx.add(rule(HostPattern::Kind::kExact, "api.example.com"));     // r4
  idx.add(rule(HostPattern::Kind::kWildcard, "com.example.net"));  // r5
  std::string err;
  ASSERT_TRUE(idx.build(&err)) << err;
  EXPECT_EQ(names(idx.exact("api.example.com")), (Names{"r1", "r4"}));
  EXPECT_TRUE(idx.exact("example.com").empty());
  EXPECT_TRUE(idx.exact("API.example.com").empty());  // lookups take normalised names

  struct Case {
    const char* name;
    const char* host;
    Names want;  // wildcard rule lists visited, longest suffix first
  };
  const Case cases[] = {
      {"one_level", "a.example.com", {"r2"}},
      {"longest_first", "a.eu.example.com", {"r3", "r2"}},
      {"deep", "x.y.z.eu.example.com", {"r3", "r2"}},
      {"apex_not_matched", "example.com", {}},
      {"suffix_apex_of_longer", "eu.example.com", {"r2"}},
      {"label_boundary", "aexample.com", {}},
      {"unrelated", "example.org", {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Names got;
    idx.forEachWildcard(c.host, [&](RuleSpan rs) {
      for (auto n : names(rs)) got.push_back(n);
      return false;
    });
    EXPECT_EQ(got, c.want);
  }
  Names first;
  idx.forEachWildcard("a.eu.example.com", [&](RuleSpan rs) {
    first = names(rs);
    return true;  // stop at the most specific
  });
  EXPECT_EQ(first, (Names{"r3"}));
}

TEST_F(PolicyHostIndex, RegexSetAnchoredAndOrdered) {
  HostIndex idx;
  idx.add(rule(HostPattern::Kind::kRegex, ".*\\.example\\.com"));  // r1
  idx.add(rule(HostPattern::Kind::kRegex, "api\\..*"));            // r2
  idx.add(rule(HostPattern::Kind::kRegex, ".*\\.example\\.com"));  // r3 (same text as r1)
  idx.add(rule(HostPattern::Kind::kRegex, "example"));             // r4
  std::string err;
  ASSERT_TRUE(idx.build(&err)) << err;
  struct Case {
    const char* name;
    const char* host;
    Names want;
  };
  const Case cases[] = {
      {"two_patterns_three_rules", "api.example.com", {"r1", "r2", "r3"}},
      {"one_pattern", "www.example.com", {"r1", "r3"}},
      {"anchored_start", "example", {"r4"}},
      {"anchored_end", "example.org", {}},
      {"no_substring_match", "www.example.com.evil.org", {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    RuleList out;
    idx.matchRegex(c.host, &out);
    EXPECT_EQ(names(out), c.want);
  }
}

TEST_F(PolicyHostIndex, CidrBucketsLongestPrefixFirst) {
  HostIndex idx;
  idx.add(cidrRule({"10.0.0.0/8"}));                     // r1
  idx.add(cidrRule({"10.1.0.0/16", "192.168.0.0/16"}));  // r2
  idx.add(cidrRule({"10.1.2.3"}));                       // r3
  idx.add(cidrRule({"fc00::/7"}));                       // r4
  std::string err;
  ASSERT_TRUE(idx.build(&err)) << err;
  struct Case {
    const char* name;
    const char* addr;
    Names want;
  };
  const Case cases[] = {
      {"host_route_first", "10.1.2.3", {"r3", "r2", "r1"}},
      {"sixteen_then_eight", "10.1.9.9", {"r2", "r1"}},
      {"eight_only", "10.200.0.1", {"r1"}},
      {"second_cidr_of_rule", "192.168.7.7", {"r2"}},
      {"v6", "fd00::1", {"r4"}},
      {"families_do_not_mix", "::ffff:10.1.2.3", {}},
      {"outside", "11.0.0.1", {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Names got;
    idx.forEachCidr(*parseIp(c.addr), [&](RuleSpan rs) {
      for (auto n : names(rs)) got.push_back(n);
      return false;
    });
    EXPECT_EQ(got, c.want);
  }
}

TEST_F(PolicyHostIndex, NameTableManyKeysAndCollisions) {
  NameTable t;
  std::vector<const CompiledRule*> stored;
  for (int i = 0; i < 5000; ++i) {
    stored.push_back(rule(HostPattern::Kind::kExact, "h" + std::to_string(i)));
    t.add("h" + std::to_string(i), stored.back());
  }
  t.add("h42", stored[7]);  // a second rule under one key keeps insertion order
  t.freeze();
  EXPECT_FALSE(t.empty());
  for (int i = 0; i < 5000; ++i) {
    RuleSpan rs = t.find("h" + std::to_string(i));
    ASSERT_FALSE(rs.empty()) << i;
    EXPECT_EQ(rs[0], stored[i]);
  }
  EXPECT_EQ(t.find("h42").size(), 2u);
  EXPECT_EQ(t.find("h42")[1], stored[7]);
  EXPECT_TRUE(t.find("h5000").empty());
  EXPECT_TRUE(t.find("").empty());
  EXPECT_TRUE(t.find("h").empty());
  size_t entries = 0;
  t.forEach([&](std::string_view, RuleSpan) { ++entries; });
  EXPECT_EQ(entries, 5000u);
  NameTable empty;
  empty.freeze();
  EXPECT_TRUE(empty.find("h1").empty());
}

TEST(PolicyHostKey, SuffixHashesMatchDirectHashes) {
  struct Case {
    const char* name;
    const char* host;
    std::vector<std::string> suffixes;  // longest first
  };
  const Case cases[] = {
      {"three_labels", "a.b.c", {"b.c", "c"}},
      {"one_label", "localhost", {}},
      {"deep", "x.y.eu.example.com", {"y.eu.example.com", "eu.example.com", "example.com", "com"}},
      {"address_text", "127.0.0.1", {"0.0.1", "0.1", "1"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    HostKey key(c.host);
    EXPECT_EQ(key.hash, hashName(c.host));
    ASSERT_EQ(key.suffixes, static_cast<int>(c.suffixes.size()));
    for (int i = 0; i < key.suffixes; ++i) {
      EXPECT_EQ(key.name.substr(key.suffixStart[i]), c.suffixes[i]);
      EXPECT_EQ(key.suffixHash[i], hashName(c.suffixes[i]));
    }
  }
  EXPECT_NE(hashName("a.b"), hashName("b.a"));
}

}  // namespace
}  // namespace sandgate::policy
