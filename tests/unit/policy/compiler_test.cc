// Tests for policy/compiler.cc: every load-time diagnostic (file, line, column, key path,
// message), credential ties between equally specific rules, and large policies.
#include <gtest/gtest.h>

#include "policy/engine.h"
#include "tests/unit/policy/engine_test_util.h"

namespace sandgate::policy {
namespace {

using namespace policytest;  // NOLINT: the test helpers

// ---------------------------------------------------------------------------------------------
// Credential ties.

TEST(PolicyCompiler, CredentialTieAtEqualSpecificityIsALoadError) {
  struct TieCase {
    const char* name;
    R a;
    R b;
    bool error;
  };
  std::vector<TieCase> cases;
  cases.push_back({"exact_different_credentials", R(12).host("api.example.com").credential("a"),
                   R(15).host("API.example.com.").credential("b"), true});
  cases.push_back({"exact_credential_vs_none", R(12).host("api.example.com").credential("a"),
                   R(15).host("api.example.com"), true});
  cases.push_back({"wildcard_same_suffix", R(12).host("*.example.com").credential("a"),
                   R(15).host("*.example.com").credential("b"), true});
  cases.push_back({"regex_same_text", R(12).host("re:a.*").credential("a"),
                   R(15).host("re:a.*").credential("b"), true});
  cases.push_back({"cidr_same_range", R(12).cidrs({"10.0.0.0/8"}).credential("a"),
                   R(15).cidrs({"10.0.0.0/8"}).credential("b"), true});
  cases.push_back({"same_credential", R(12).host("api.example.com").credential("a"),
                   R(15).host("api.example.com").credential("a"), false});
  cases.push_back({"disjoint_ports", R(12).host("api.example.com").credential("a"),
                   R(15).host("api.example.com").credential("b").ports({8443}), false});
  cases.push_back({"disjoint_methods",
                   R(12).host("api.example.com").credential("a").methods({"GET"}),
                   R(15).host("api.example.com").credential("b").methods({"POST"}), false});
  cases.push_back({"different_specificity", R(12).host("api.example.com").credential("a"),
                   R(15).host("*.example.com").credential("b"), false});
  for (auto& tc : cases) {
    SCOPED_TRACE(tc.name);
    Cfg c;
    c.credential("a").credential("b");
    c.allow("p", std::move(tc.a));
    c.allow("p", std::move(tc.b));
    c.task("t", "p");
    auto r = Engine::compile(c.config());
    ASSERT_EQ(!r.ok(), tc.error) << r.errorText();
    if (!tc.error) continue;
    ASSERT_EQ(r.errors().size(), 1u) << r.errorText();
    const Diagnostic& d = r.errors()[0];
    EXPECT_EQ(d.file, "agent.yaml");
    EXPECT_EQ(d.line, 15);
    EXPECT_NE(d.message.find("agent.yaml:12"), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("agent.yaml:15"), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("different credentials"), std::string::npos) << d.message;
  }
}

TEST(PolicyCompiler, CredentialTieReportedOnceForSharedPolicy) {
  Cfg c;
  c.credential("a").credential("b");
  c.policy("shared").policy("x", {"shared"}).policy("y", {"shared"});
  c.allow("shared", R(2).host("api.example.com").credential("a"));
  c.allow("shared", R(3).host("api.example.com").credential("b"));
  c.task("t1", "x").task("t2", "y");
  auto errors = c.errors();
  EXPECT_EQ(errors.size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Load-time diagnostics: file, line, column, key path and message.

TEST(PolicyCompiler, Diagnostics) {
  struct DiagCase {
    const char* name;
    R rule;
    bool deny;
    int line;
    int col;
    const char* keyPath;
    const char* message;
  };
  std::vector<DiagCase> cases;
  cases.push_back({"bare_star", std::move(R(14).host("*")), false, 14, 11,
                   "policies.agent.allow[0].host", "a bare '*' would allow every host"});
  cases.push_back({"public_suffix", std::move(R(14).host("*.co.uk")), false, 14, 11,
                   "policies.agent.allow[0].host", "public suffix 'co.uk'"});
  cases.push_back({"mid_label", std::move(R(14).host("foo.*.com")), false, 14, 11,
                   "policies.agent.allow[0].host", "whole leftmost label"});
  cases.push_back({"regex", std::move(R(14).host("re:(")), true, 14, 11,
                   "policies.agent.deny[0].host", "invalid RE2 regular expression"});
  cases.push_back({"non_ascii",
                   std::move(R(14).host("b\xc3\xbc"
                                        "cher.de")),
                   false, 14, 11, "policies.agent.allow[0].host", "punycode"});
  cases.push_back({"cidr_host_bits", std::move(R(14).cidrs({"10.0.0.0/8", "10.0.0.1/8"})), false,
                   14, 13, "policies.agent.allow[0].cidrs[1]", "host bits are set"});
  cases.push_back({"port_zero", std::move(R(14).host("a.example.com").ports({0})), false, 15, 7,
                   "policies.agent.allow[0].ports[0]", "between 1 and 65535"});
  cases.push_back({"lower_method", std::move(R(14).host("a.example.com").methods({"get"})), false,
                   16, 14, "policies.agent.allow[0].methods[0]", "write \"GET\""});
  cases.push_back({"relative_path", std::move(R(14).host("a.example.com").paths({"v1"})), false, 17,
                   12, "policies.agent.allow[0].paths[0]", "must start with '/'"});
  cases.push_back({"unknown_credential", std::move(R(14).host("a.example.com").credential("nope")),
                   false, 18, 17, "policies.agent.allow[0].credential",
                   "unknown credential \"nope\""});
  cases.push_back({"credential_on_deny", std::move(R(14).host("a.example.com").credential("known")),
                   true, 18, 17, "policies.agent.deny[0].credential",
                   "deny rules take no credential"});
  cases.push_back({"deny_host_and_cidrs",
                   std::move(R(14).host("a.example.com").cidrs({"10.0.0.0/8"})), true, 14, 5,
                   "policies.agent.deny[0]", "either a host or cidrs"});
  cases.push_back({"neither", std::move(R(14).ports({443})), false, 14, 5,
                   "policies.agent.allow[0]", "needs a host, cidrs, or both"});
  for (auto& dc : cases) {
    SCOPED_TRACE(dc.name);
    Cfg c;
    c.credential("known");
    if (dc.deny) {
      c.deny("agent", std::move(dc.rule));
    } else {
      c.allow("agent", std::move(dc.rule));
    }
    c.task("t", "agent");
    auto errors = c.errors();
    ASSERT_EQ(errors.size(), 1u);
    const Diagnostic& d = errors[0];
    EXPECT_EQ(d.file, "agent.yaml");
    EXPECT_EQ(d.line, dc.line);
    EXPECT_EQ(d.col, dc.col);
    EXPECT_EQ(d.keyPath, dc.keyPath);
    EXPECT_NE(d.message.find(dc.message), std::string::npos) << d.message;
  }
}

TEST(PolicyCompiler, AllErrorsAreReported) {
  Cfg c;
  c.allow("agent", R(2).host("*.com"));
  c.allow("agent", R(3).host("ok.example.com").methods({"post"}));
  c.deny("global", R(4).host("a*.example.com"));
  c.task("t", "agent");
  c.task("u", "missing");
  auto errors = c.errors();
  ASSERT_EQ(errors.size(), 4u);
  std::vector<std::string> keys;
  for (const auto& d : errors) keys.push_back(d.keyPath);
  EXPECT_NE(std::find(keys.begin(), keys.end(), "global.deny[0].host"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "policies.agent.allow[0].host"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "policies.agent.allow[1].methods[0]"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "tasks[1].policy"), keys.end());
  EXPECT_EQ(errors[0].str().rfind("agent.yaml:", 0), 0u) << errors[0].str();
}

TEST(PolicyCompiler, ManyRulesStillDecideCorrectly) {
  Cfg c;
  for (int i = 0; i < 2000; ++i) {
    c.allow("p", R(10 + i).host("h" + std::to_string(i) + ".example.com"));
  }
  for (int i = 0; i < 200; ++i) {
    c.allow("p", R(3000 + i).host("*.w" + std::to_string(i) + ".example.net"));
  }
  for (int i = 0; i < 50; ++i) {
    c.allow("p", R(4000 + i).host("re:r" + std::to_string(i) + "-[a-z]+\\.example\\.org"));
  }
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(
      *e,
      {
          {"exact", "t", tunnel("h1999.example.com"), kAllow, reason::kAllowed, "agent.yaml:2009"},
          {"wildcard", "t", tunnel("x.y.w77.example.net"), kAllow, reason::kAllowed,
           "agent.yaml:3077"},
          {"regex", "t", tunnel("r42-abc.example.org"), kAllow, reason::kAllowed,
           "agent.yaml:4042"},
          {"miss", "t", tunnel("h2000.example.com"), kDeny, reason::kNoMatchingRule, ""},
      });
}

}  // namespace
}  // namespace sandgate::policy
