// Tests for policy/host_pattern.cc: what a rule's `host:` may say, and each refusal's message.
#include "policy/host_pattern.h"

#include <gtest/gtest.h>

namespace sandgate::policy {
namespace {

using Kind = HostPattern::Kind;

struct Accepted {
  const char* name;
  const char* input;
  Kind kind;
  const char* text;
  bool isAddress = false;
};

TEST(PolicyHostPattern, Accepted) {
  const Accepted cases[] = {
      {"exact", "api.openai.com", Kind::kExact, "api.openai.com"},
      {"exact_upper_trailing_dot", "API.OpenAI.com.", Kind::kExact, "api.openai.com"},
      {"single_label", "localhost", Kind::kExact, "localhost"},
      {"wildcard", "*.githubusercontent.com", Kind::kWildcard, "githubusercontent.com"},
      {"wildcard_upper", "*.Example.COM.", Kind::kWildcard, "example.com"},
      {"wildcard_under_public_suffix", "*.example.co.uk", Kind::kWildcard, "example.co.uk"},
      {"regex", "re:^api[0-9]+\\.example\\.com$", Kind::kRegex, "^api[0-9]+\\.example\\.com$"},
      {"regex_kept_verbatim", "re:(a|b)\\.Example\\.com", Kind::kRegex, "(a|b)\\.Example\\.com"},
      {"ipv4", "127.0.0.1", Kind::kExact, "127.0.0.1", true},
      {"ipv4_loose_normalised", "2130706433", Kind::kExact, "127.0.0.1", true},
      {"ipv6_bracketed", "[::1]", Kind::kExact, "::1", true},
      {"ipv6_bare", "0:0::1", Kind::kExact, "::1", true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto got = parseHostPattern(c.input);
    ASSERT_TRUE(std::holds_alternative<HostPattern>(got)) << std::get<std::string>(got);
    const auto& p = std::get<HostPattern>(got);
    EXPECT_EQ(p.kind, c.kind);
    EXPECT_EQ(p.text, c.text);
    EXPECT_EQ(p.isAddress, c.isAddress);
  }
}

struct Refused {
  const char* name;
  const char* input;
  const char* message;  // substring of the error
};

TEST(PolicyHostPattern, Refused) {
  const Refused cases[] = {
      {"empty", "", "host pattern is empty"},
      {"bare_star", "*", "a bare '*' would allow every host"},
      {"star_dot", "*.", "expected a domain after '*.'"},
      {"wildcard_tld_com", "*.com", "'*.com' covers a whole top-level domain"},
      {"wildcard_single_label", "*.internal", "'*.internal' covers a whole top-level domain"},
      {"wildcard_co_uk", "*.co.uk", "covers the public suffix 'co.uk'"},
      {"wildcard_org_uk", "*.org.uk", "covers the public suffix 'org.uk'"},
      {"wildcard_ac_uk", "*.ac.uk", "covers the public suffix 'ac.uk'"},
      {"wildcard_gov_uk", "*.gov.uk", "covers the public suffix 'gov.uk'"},
      {"wildcard_co_jp", "*.co.jp", "covers the public suffix 'co.jp'"},
      {"wildcard_com_cn", "*.com.cn", "covers the public suffix 'com.cn'"},
      {"wildcard_com_au", "*.com.au", "covers the public suffix 'com.au'"},
      {"wildcard_com_br", "*.com.br", "covers the public suffix 'com.br'"},
      {"wildcard_co_in", "*.co.in", "covers the public suffix 'co.in'"},
      {"wildcard_github_io", "*.github.io", "covers the public suffix 'github.io'"},
      {"wildcard_herokuapp", "*.herokuapp.com", "covers the public suffix 'herokuapp.com'"},
      {"wildcard_appspot", "*.appspot.com", "covers the public suffix 'appspot.com'"},
      {"wildcard_cloudfront", "*.cloudfront.net", "covers the public suffix 'cloudfront.net'"},
      {"wildcard_amazonaws", "*.amazonaws.com", "covers the public suffix 'amazonaws.com'"},
      {"wildcard_public_suffix_upper", "*.CO.UK.", "covers the public suffix 'co.uk'"},
      {"mid_label_prefix", "a*.b.com", "'*' is only allowed as the whole leftmost label"},
      {"mid_label_suffix", "*x.com", "'*' is only allowed as the whole leftmost label"},
      {"inner_label", "foo.*.com", "'*' is only allowed as the whole leftmost label"},
      {"double_star", "**.example.com", "'*' is only allowed as the whole leftmost label"},
      {"two_wildcards", "*.*.example.com", "'*' is only allowed as the whole leftmost label"},
      {"non_ascii",
       "b\xc3\xbc"
       "cher.de",
       "punycode"},
      {"empty_label", "a..example.com", "empty label"},
      {"long_label", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com",
       "(at most 63)"},
      {"bad_char", "exa$mple.com", "character '$'"},
      {"userinfo", "user@example.com", "userinfo"},
      {"with_port", "example.com:443", "':' is not allowed"},
      {"numeric_tld", "example.999", "looks like an IP address"},
      {"wildcard_over_ip", "*.127.0.0.1", "cannot be applied to an IP address"},
      {"zone", "[fe80::1%25eth0]", "zone IDs"},
      {"regex_empty", "re:", "needs a regular expression"},
      {"regex_syntax", "re:(unclosed", "invalid RE2 regular expression: missing )"},
      {"regex_backreference", "re:(a)\\1", "invalid RE2 regular expression"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto got = parseHostPattern(c.input);
    ASSERT_TRUE(std::holds_alternative<std::string>(got)) << std::get<HostPattern>(got).text;
    const auto& msg = std::get<std::string>(got);
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
  }
}

TEST(PolicyHostPattern, LongNameRefused) {
  std::string name;
  while (name.size() < 260) name += "abcdefghi.";
  name += "com";
  auto got = parseHostPattern(name);
  ASSERT_TRUE(std::holds_alternative<std::string>(got));
  EXPECT_NE(std::get<std::string>(got).find("(at most 253)"), std::string::npos);
}

TEST(PolicyPublicSuffix, List) {
  for (const char* s : {"com",
                        "net",
                        "org",
                        "io",
                        "dev",
                        "app",
                        "co",
                        "uk",
                        "co.uk",
                        "org.uk",
                        "ac.uk",
                        "gov.uk",
                        "de",
                        "jp",
                        "co.jp",
                        "cn",
                        "com.cn",
                        "au",
                        "com.au",
                        "br",
                        "com.br",
                        "in",
                        "co.in",
                        "fr",
                        "ru",
                        "nl",
                        "eu",
                        "us",
                        "ca",
                        "github.io",
                        "herokuapp.com",
                        "appspot.com",
                        "cloudfront.net",
                        "amazonaws.com"}) {
    SCOPED_TRACE(s);
    EXPECT_TRUE(isPublicSuffix(s));
  }
  EXPECT_FALSE(isPublicSuffix("example.com"));
  EXPECT_FALSE(isPublicSuffix("githubusercontent.com"));
  EXPECT_FALSE(isPublicSuffix("uk.co"));
}

}  // namespace
}  // namespace sandgate::policy
