// Tests for policy/regex_index.cc: the literal domain a host regex must end with (which decides
// the RE2::Set it runs in), and that grouping never changes what matches.
#include "policy/regex_index.h"

#include <gtest/gtest.h>
#include <re2/re2.h>

#include <deque>

#include "policy/compiled_rule.h"

namespace sandgate::policy {
namespace {

TEST(PolicyRegexDomainSuffix, Table) {
  struct Case {
    const char* name;
    const char* re;
    const char* suffix;  // "" = no provable suffix (the regex runs for every host)
  };
  const Case cases[] = {
      {"plain", "api[0-9]+\\.example\\.org", "example.org"},
      {"dollar", "api[0-9]+\\.example\\.org$", "example.org"},
      {"partial_label_dropped", "[a-z]+example\\.org", "org"},
      {"group_before_tail", "(api|cdn)-[0-9]+\\.eu\\.example\\.org", "eu.example.org"},
      {"non_capturing_group", "(?:a|b)\\.example\\.com", "example.com"},
      {"flags_ok", "(?i)api\\.example\\.com", "example.com"},
      {"exact_two_labels", "example\\.org", "org"},
      {"top_level_alternation", "a\\.example\\.org|b\\.other\\.net", ""},
      {"alternation_in_class_is_literal", "[|a]+\\.example\\.org", "example.org"},
      {"alternation_after_escaped_paren", "\\(|x\\.example\\.org", ""},
      {"group_at_end", "api\\.(example\\.org)", ""},
      {"optional_tail", "api\\.example\\.org?", ""},
      {"quantified_tail", "api\\.example\\.or+", ""},
      {"any_char_dot", "api\\.example.org", ""},
      {"any_char_dot_last", "api\\.example\\.org.", ""},
      {"escaped_backslash_then_any", "api\\\\.org", ""},
      {"escape_class_at_end", "api\\.example\\d", ""},
      {"upper_case", "api\\.Example\\.ORG", ""},
      {"no_dot", "localhost", ""},
      {"trailing_dot", "example\\.", ""},
      {"wildcard_tail", "api\\..*", ""},
      {"escaped_dollar", "example\\.org\\$", ""},
      {"quoted_literal", "\\Qfoo\\.org", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(regexDomainSuffix(c.re), c.suffix) << c.re;
  }
}

TEST(PolicyRegexDomainSuffix, PrefixIsThePatternWithoutTheLiteralEnding) {
  struct Case {
    const char* re;
    const char* prefix;
  };
  const Case cases[] = {
      {"api[0-9]+\\.example\\.org", "api[0-9]+"},
      {"api[0-9]+\\.example\\.org$", "api[0-9]+"},
      {"[a-z]+example\\.org", "[a-z]+example"},
      {"(a|b)\\.x\\.example\\.org", "(a|b)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.re);
    size_t len = 0;
    ASSERT_FALSE(regexDomainSuffix(c.re, &len).empty());
    EXPECT_EQ(std::string_view(c.re).substr(0, len), c.prefix);
  }
}

// Grouped matching must agree with matching every regex on its own.
TEST(PolicyRegexIndex, GroupingAgreesWithDirectMatching) {
  const std::vector<std::string> regexes = {
      "api[0-9]+\\.example\\.org",
      "[a-z]+\\.example\\.org",
      "(a|b)\\.x\\.example\\.org",
      ".*\\.net",
      "api\\..*",
      "a\\.example\\.org|b\\.other\\.net",
      "example\\.org",
      "(?i)www\\.example\\.org",
      "\\Qa.b\\E\\.org",
      "w+\\.example\\.org$",
      "[a-z]+example\\.org",
  };
  std::deque<CompiledRule> rules;
  RegexIndex idx;
  for (size_t i = 0; i < regexes.size(); ++i) {
    CompiledRule& r = rules.emplace_back();
    r.order = static_cast<int>(i);
    idx.add(regexes[i], &r);
  }
  std::string err;
  ASSERT_TRUE(idx.build(&err)) << err;
  const char* hosts[] = {"api1.example.org",
                         "www.example.org",
                         "a.x.example.org",
                         "b.other.net",
                         "a.example.org",
                         "example.org",
                         "api.anything.io",
                         "foo.net",
                         "org",
                         "x.example.org.evil.com",
                         "a.b.org",
                         "ww.example.org",
                         "myexample.org"};
  for (const char* host : hosts) {
    SCOPED_TRACE(host);
    RuleList got;
    idx.match(HostKey(host), &got);
    std::vector<int> gotOrders, wantOrders;
    for (const CompiledRule* r : got) gotOrders.push_back(r->order);
    for (size_t i = 0; i < regexes.size(); ++i) {
      if (RE2::FullMatch(host, RE2(regexes[i]))) wantOrders.push_back(static_cast<int>(i));
    }
    EXPECT_EQ(gotOrders, wantOrders);
  }
}

}  // namespace
}  // namespace sandgate::policy
