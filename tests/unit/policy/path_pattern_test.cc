// Tests for policy/path_pattern.cc: method tokens, path globs and the path normal form.
#include "policy/path_pattern.h"

#include <gtest/gtest.h>
#include <re2/re2.h>

namespace sandgate::policy {
namespace {

TEST(PolicyMethod, Validation) {
  struct Case {
    const char* name;
    const char* method;
    const char* error;  // nullptr: valid
  };
  const Case cases[] = {
      {"get", "GET", nullptr},
      {"extension", "PROPFIND", nullptr},
      {"token_chars", "M-SEARCH", nullptr},
      {"lower", "get", "write \"GET\" rather than \"get\""},
      {"mixed", "Post", "write \"POST\" rather than \"Post\""},
      {"space", "GET POST", "contains ' '"},
      {"slash", "GET/1", "contains '/'"},
      {"empty", "", "empty method"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string err;
    bool ok = isValidMethod(c.method, &err);
    EXPECT_EQ(ok, c.error == nullptr);
    if (c.error) {
      EXPECT_NE(err.find(c.error), std::string::npos) << err;
    }
  }
}

TEST(PolicyPathPattern, GlobMatching) {
  struct Case {
    const char* name;
    const char* pattern;
    const char* path;
    bool match;
  };
  const Case cases[] = {
      {"literal", "/v1/models", "/v1/models", true},
      {"literal_prefix_is_not_enough", "/v1/models", "/v1/models/x", false},
      {"literal_dot_is_not_any_char", "/v1/a.b", "/v1/axb", false},
      {"literal_regex_chars_quoted", "/v1/(x)+", "/v1/(x)+", true},
      {"star_one_segment", "/v1/*/files", "/v1/abc/files", true},
      {"star_empty_segment_text", "/v1/*/files", "/v1//files", true},
      {"star_not_across_slash", "/v1/*/files", "/v1/a/b/files", false},
      {"star_in_segment", "/v1/file-*.json", "/v1/file-12.json", true},
      {"star_in_segment_no_slash", "/v1/file-*.json", "/v1/file-1/2.json", false},
      {"double_star_trailing", "/v1/**", "/v1/a/b/c", true},
      {"double_star_trailing_direct", "/v1/**", "/v1/", true},
      // The directory itself is in the tree (#38: /admin is what /admin/** is meant to deny).
      {"double_star_trailing_the_directory", "/v1/**", "/v1", true},
      {"double_star_trailing_not_prefix", "/v1/**", "/v1x", false},
      {"escaped_pattern_matches_decoded", "/%76%31/**", "/v1/x", true},
      {"double_star_not_sibling", "/v1/**", "/v10/a", false},
      {"double_star_middle_zero_segments", "/a/**/b", "/a/b", true},
      {"double_star_middle_many_segments", "/a/**/b", "/a/x/y/b", true},
      {"double_star_middle_wrong_end", "/a/**/b", "/a/x/c", false},
      {"double_star_in_segment", "/a/x**", "/a/xy/z", true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string regex, err;
    ASSERT_TRUE(pathPatternToRegex(c.pattern, &regex, &err)) << err;
    RE2 re(regex);
    ASSERT_TRUE(re.ok()) << regex;
    EXPECT_EQ(RE2::FullMatch(c.path, re), c.match) << regex;
  }
}

TEST(PolicyPathPattern, RegexIsFullMatch) {
  std::string regex, err;
  ASSERT_TRUE(pathPatternToRegex("re:/v[12]/chat", &regex, &err));
  RE2 re(regex);
  EXPECT_TRUE(RE2::FullMatch("/v2/chat", re));
  EXPECT_FALSE(RE2::FullMatch("/v2/chat/x", re));
  EXPECT_FALSE(RE2::FullMatch("/x/v2/chat", re));
}

TEST(PolicyPathPattern, Refused) {
  struct Case {
    const char* name;
    const char* pattern;
    const char* error;
  };
  const Case cases[] = {
      {"no_leading_slash", "v1/models", "must start with '/'"},
      {"empty", "", "must start with '/'"},
      {"query", "/v1?x=1", "query string is not matched"},
      {"fragment", "/v1#x", "character '#'"},
      {"space", "/v1 x", "character ' '"},
      {"triple_star", "/v1/***", "use '*' (one segment) or '**' (any depth)"},
      {"dot_dot", "/v1/../admin", "not in normal form"},
      {"dot", "/v1/./x", "not in normal form"},
      {"encoded_slash", "/v1%2fadmin", "not in normal form"},
      {"regex_empty", "re:", "needs a regular expression"},
      {"regex_syntax", "re:/v1/(", "invalid RE2 regular expression: missing )"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string regex, err;
    EXPECT_FALSE(pathPatternToRegex(c.pattern, &regex, &err));
    EXPECT_NE(err.find(c.error), std::string::npos) << err;
  }
}

TEST(PolicyPathPattern, NormalForm) {
  struct Case {
    const char* name;
    const char* path;
    bool normal;
  };
  const Case cases[] = {
      {"root", "/", true},
      {"plain", "/v1/models", true},
      {"trailing_slash", "/v1/", true},
      {"dots_in_name", "/v1/a..b/.well-known", true},
      {"percent_other", "/v1/a%20b", true},
      {"relative", "v1", false},
      {"empty", "", false},
      {"dot_segment", "/v1/./x", false},
      {"dot_dot_segment", "/v1/../admin", false},
      {"trailing_dot_dot", "/v1/..", false},
      {"trailing_dot", "/v1/.", false},
      {"double_slash", "/v1//admin", false},
      {"leading_double_slash", "//admin", false},
      {"encoded_dot", "/v1/%2e%2e/admin", false},
      {"encoded_dot_upper", "/v1/%2E%2E/admin", false},
      {"encoded_slash", "/v1%2Fadmin", false},
      {"encoded_backslash", "/v1%5cadmin", false},
      {"backslash", "/v1\\..\\admin", false},
      {"truncated_percent", "/v1%2", false},
      {"path_parameter", "/v1/..;/admin", false},
      {"path_parameter_in_name", "/v1/a;b", false},
      {"encoded_semicolon", "/v1/..%3B/admin", false},
      {"mixed_case_encoded_dot", "/v1/%2E%2e/admin", false},
      {"half_encoded_dot", "/v1/.%2E/admin", false},
      {"overlong_dot", "/v1/%c0%ae%C0%AE/admin", false},
      {"overlong_c1", "/v1/%C1%9c", false},
      {"iis_unicode_escape", "/v1/%u002e%u002e/admin", false},
      {"percent_not_hex", "/v1/%zz", false},
      {"encoded_other_utf8", "/v1/%c3%a9", true},
      // #38 item 2: what servers trim or stop at.
      {"segment_trailing_dot", "/admin./x", false},
      {"last_segment_trailing_dot", "/admin.", false},
      {"segment_trailing_encoded_space", "/admin%20/x", false},
      {"segment_trailing_encoded_tab", "/admin%09", false},
      {"encoded_nul", "/admin%00.json", false},
      {"encoded_newline", "/a%0ab", false},
      {"encoded_del", "/a%7Fb", false},
      {"space_inside_a_name", "/a%20b/c", true},
      {"dot_inside_a_name", "/a.b/c.json", true},
      {"space", "/a b", false},
      {"non_ascii", "/\xc3\xa9", false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(isNormalPath(c.path), c.normal);
  }
}

}  // namespace
}  // namespace sandgate::policy
