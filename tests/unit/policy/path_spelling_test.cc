// Paths and methods as a server reads them (issue #38 items 2 and 4): the canonical path every
// glob sees, how deny rules cover other spellings, the lint warnings about them, and override
// headers and parameters on hosts whose rules restrict methods or paths.
#include <gtest/gtest.h>

#include <string>

#include "engine_test_util.h"
#include "policy/check.h"
#include "policy/path_pattern.h"

namespace sandgate::policy {
namespace {

using namespace policytest;

TEST(PolicyCanonicalPath, DecodesUnreservedOnly) {
  EXPECT_EQ(canonicalPath("/%61dmin/x"), "/admin/x");
  EXPECT_EQ(canonicalPath("/%41%5a%30%2D%2e%5F%7e"), "/AZ0-._~");
  EXPECT_EQ(canonicalPath("/a%2Fb%20c%25d%3b"), "/a%2Fb%20c%25d%3b");  // reserved, kept
  EXPECT_EQ(canonicalPath("/%6"), "/%6");
  EXPECT_EQ(canonicalPath("/%zz%"), "/%zz%");
  EXPECT_EQ(canonicalPath("/%2561"), "/%2561");  // decoded once: "%61" is not "a"
}

// A broad allow narrowed by `deny paths: [/admin/**]`: every spelling a server may read as
// /admin/... is refused (the key is never injected), other paths pass.
TEST(PolicyPathSpelling, DenyPathsCoverWhatAServerReadsAsTheDeniedPath) {
  Cfg c;
  c.credential("key");
  c.allow("p", R(2).host("api.example.com").credential("key"));
  c.deny("p", R(8).host("api.example.com").paths({"/admin/**"}));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  auto get = [](const char* path) { return visible("api.example.com", 443, "GET", path); };
  expectCases(
      *e,
      {
          {"encoded_letter", "t", get("/%61dmin/x"), kDeny, reason::kDeniedByRule, "agent.yaml:8"},
          {"encoded_letters", "t", get("/%61%64%6D%69%6E/x"), kDeny, reason::kDeniedByRule,
           "agent.yaml:8"},
          {"upper_case", "t", get("/ADMIN/x"), kDeny, reason::kDeniedByRule, "agent.yaml:8"},
          {"mixed_case", "t", get("/Admin/x"), kDeny, reason::kDeniedByRule, "agent.yaml:8"},
          {"the_directory_itself", "t", get("/admin"), kDeny, reason::kDeniedByRule,
           "agent.yaml:8"},
          {"the_directory_slash", "t", get("/admin/"), kDeny, reason::kDeniedByRule,
           "agent.yaml:8"},
          {"trailing_dot", "t", get("/admin./x"), kDeny, reason::kPathAmbiguous, "agent.yaml:8"},
          {"trailing_space", "t", get("/admin%20/x"), kDeny, reason::kPathAmbiguous,
           "agent.yaml:8"},
          {"trailing_tab", "t", get("/admin%09/x"), kDeny, reason::kPathAmbiguous, "agent.yaml:8"},
          {"nul", "t", get("/admin%00/x"), kDeny, reason::kPathAmbiguous, "agent.yaml:8"},
          {"encoded_dot_segment", "t", get("/x/%2e%2e/admin/x"), kDeny, reason::kPathAmbiguous,
           "agent.yaml:8"},
          {"another_path", "t", get("/v1/x"), kAllow, reason::kAllowed, "agent.yaml:2"},
          {"a_longer_name", "t", get("/administrator"), kAllow, reason::kAllowed, "agent.yaml:2"},
          {"space_inside_a_name", "t", get("/a%20b/c"), kAllow, reason::kAllowed, "agent.yaml:2"},
      });
}

// Allow rules match the canonical path too, but keep their case: refusing "/V1/x" is the safe
// side of an allow rule, as matching "/ADMIN/x" is of a deny rule.
TEST(PolicyPathSpelling, AllowPathsMatchTheCanonicalPathCaseSensitively) {
  Cfg c;
  c.allow("p", R(2).host("api.example.com").paths({"/v1/**"}));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  auto get = [](const char* path) { return visible("api.example.com", 443, "GET", path); };
  expectCases(
      *e,
      {
          {"encoded_letter", "t", get("/%761/models"), kAllow, reason::kAllowed, "agent.yaml:2"},
          {"the_directory_itself", "t", get("/v1"), kAllow, reason::kAllowed, "agent.yaml:2"},
          {"upper_case", "t", get("/V1/models"), kDeny, reason::kPathNotAllowed, "agent.yaml:2"},
          {"sibling", "t", get("/v10/models"), kDeny, reason::kPathNotAllowed, "agent.yaml:2"},
          {"trailing_dot", "t", get("/v1./models"), kDeny, reason::kPathAmbiguous, "agent.yaml:2"},
      });
}

// `policy check` decides through the same engine: it agrees with the proxy.
TEST(PolicyPathSpelling, PolicyCheckAgrees) {
  Cfg c;
  c.allow("p", R(2).host("api.example.com"));
  c.deny("p", R(8).host("api.example.com").paths({"/admin/**"}));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  for (const char* url : {"https://api.example.com/%61dmin/x", "https://api.example.com/ADMIN/x",
                          "https://api.example.com/admin", "https://api.example.com/admin./x"}) {
    SCOPED_TRACE(url);
    auto target = parseCheckTarget(url);
    ASSERT_TRUE(std::holds_alternative<CheckTarget>(target));
    auto r = checkTarget(*e, c.config(), "t", std::get<CheckTarget>(target), std::nullopt);
    EXPECT_FALSE(r.decision.allowed());
    EXPECT_EQ(r.decision.rule, "agent.yaml:8");
  }
}

// `sandgate policy lint`: a deny path that covers one path only, and a pattern written with
// escapes that is matched decoded.
TEST(PolicyPathSpelling, LintWarnsAboutWhatADenyPathCovers) {
  Cfg c;
  c.allow("p", R(2).host("api.example.com"));
  c.deny("p", R(8).host("api.example.com").paths({"/admin", "/%61pi/**", "/ok/**", "re:^/x"}));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  std::string all;
  for (const auto& w : e->warnings()) all += w.keyPath + ": " + w.message + "\n";
  EXPECT_NE(all.find("policies.p.deny[0].paths[0]: \"/admin\" denies that path only"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("write \"/admin/**\""), std::string::npos) << all;
  EXPECT_NE(all.find("policies.p.deny[0].paths[1]: \"/%61pi/**\" is matched as \"/api/**\""),
            std::string::npos)
      << all;
  EXPECT_EQ(all.find("paths[2]"), std::string::npos) << all;
  EXPECT_NE(all.find("policies.p.deny[0].paths[3]: \"re:^/x\" is matched against the canonical"),
            std::string::npos)
      << all;
  // The escaped pattern denies the decoded path.
  EXPECT_EQ(e->decide("t", visible("api.example.com", 443, "GET", "/api/x")).reason,
            reason::kDeniedByRule);
}

// `sandgate policy lint`: an expression that allows every host gets the word a bare '*' gets;
// one that names a set of hosts, or a deny rule, does not.
TEST(PolicyLint, AnExpressionThatAllowsEveryHostIsNamed) {
  Cfg c;
  c.allow("p", R(2).host("re:.*"));
  c.allow("p", R(3).host("re:[^/]+"));
  c.allow("p", R(4).host("re:.*\\.example\\.org"));
  c.allow("p", R(5).host("re:(api|www)\\.example\\.com"));
  c.deny("p", R(6).host("re:.*"));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  std::string all;
  for (const auto& w : e->warnings()) all += w.keyPath + ": " + w.message + "\n";
  EXPECT_NE(all.find("policies.p.allow[0].host: \"re:.*\" allows every host"), std::string::npos)
      << all;
  EXPECT_NE(all.find("policies.p.allow[1].host: \"re:[^/]+\" allows every host"), std::string::npos)
      << all;
  EXPECT_EQ(all.find("allow[2].host"), std::string::npos) << all;
  EXPECT_EQ(all.find("allow[3].host"), std::string::npos) << all;
  EXPECT_EQ(all.find("deny[0].host"), std::string::npos) << all;
}

// Override headers and parameters are refused wherever any allow or deny rule of the host
// restricts methods or paths, in any case and with '_' for '-'.
TEST(PolicyOverride, RefusedWheneverARuleOfTheHostRestricts) {
  Cfg c;
  c.allow("p", R(2).host("denied.example.com"));
  c.deny("p", R(8).host("denied.example.com").paths({"/admin/**"}));
  c.allow("p", R(14).host("method.example.com"));
  c.deny("p", R(20).host("method.example.com").methods({"DELETE"}));
  c.allow("p", R(26).host("get.example.com").methods({"GET"}));
  c.allow("p", R(32).host("open.example.com"));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  const char* names[] = {"X-HTTP-Method-Override",
                         "X_HTTP_METHOD_OVERRIDE",
                         "x-http-method",
                         "X-Method-Override",
                         "X-Method",
                         "X-Forwarded-Method",
                         "X-Original-Method",
                         "X-Original-URL",
                         "X-Original-URI",
                         "X-Rewrite-URL",
                         "X-Forwarded-Uri",
                         "X-Forwarded-Prefix",
                         "X-Forwarded-Path",
                         "x_original_url",
                         "?_method"};
  struct Host {
    const char* host;
    const char* rule;
  };
  for (const Host h :
       {Host{"denied.example.com", "agent.yaml:8"}, Host{"method.example.com", "agent.yaml:20"},
        Host{"get.example.com", "agent.yaml:26"}}) {
    for (const char* name : names) {
      SCOPED_TRACE(std::string(h.host) + " " + name);
      Request r = visible(h.host, 443, "GET", "/x");
      r.overrideHeader = std::string_view(name);
      Decision d = e->decide("t", r);
      EXPECT_EQ(d.reason, reason::kOverrideHeader) << d.detail;
      EXPECT_EQ(d.rule, h.rule);
    }
  }
  Request r = visible("open.example.com", 443, "GET", "/x");
  r.overrideHeader = std::string_view("X-HTTP-Method-Override");
  EXPECT_EQ(e->decide("t", r).reason, reason::kAllowed);
  r = visible("denied.example.com", 443, "GET", "/x");
  r.overrideHeader = std::string_view("?_method");
  EXPECT_NE(e->decide("t", r).detail.find("parameter _method may make"), std::string::npos);
  for (const char* name : names) {
    if (name[0] != '?') {
      EXPECT_TRUE(isOverrideHeader(name)) << name;
    }
  }
  EXPECT_TRUE(isOverrideParameter("_method"));
  EXPECT_TRUE(isOverrideParameter("x-http-method-override"));
  EXPECT_FALSE(isOverrideParameter("method"));
  EXPECT_FALSE(isOverrideHeader("X-Forwarded-For"));
  EXPECT_FALSE(isOverrideHeader("X-Forwarded-Host"));
}

}  // namespace
}  // namespace sandgate::policy
