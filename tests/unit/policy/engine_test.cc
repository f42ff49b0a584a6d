// Tests for policy/engine.cc: precedence, specificity, ports, methods, paths, audit mode,
// interception, run-time credential conflicts, IP-literal targets and checkAddress(). Configs
// are built as structs; nothing here opens a socket.
#include "policy/engine.h"

#include <gtest/gtest.h>

#include "tests/unit/policy/engine_test_util.h"

namespace sandgate::policy {
namespace {

using namespace policytest;  // NOLINT: the test helpers

// ---------------------------------------------------------------------------------------------
// Precedence: global.deny > policy deny (incl. included policies) > allow > default deny.

Cfg precedenceConfig() {
  Cfg c;
  c.policy("npm").policy("agent", {"npm"});
  c.deny("global", R(3).host("evil.example.com"));
  c.allow("global", R(5).host("global-allowed.example.com"));
  c.deny("global", R(4).host("*.blocked.example.com"));
  c.allow("npm", R(10).host("registry.npmjs.org"));
  c.allow("npm", R(11).host("evil.example.com"));
  c.deny("npm", R(12).host("bad.npmjs.org"));
  c.allow("agent", R(20).host("*.githubusercontent.com"));
  c.allow("agent", R(21).host("x.blocked.example.com"));
  c.allow("agent", R(22).host("bad.npmjs.org"));
  c.deny("agent", R(25).host("gist.githubusercontent.com"));
  c.task("demo", "agent").task("npm-only", "npm");
  return c;
}

TEST(PolicyEnginePrecedence, EachLevel) {
  auto e = precedenceConfig().build();
  ASSERT_TRUE(e);
  std::vector<Case> cases = {
      {"global_deny_beats_policy_allow", "demo", tunnel("evil.example.com"), kDeny,
       reason::kGlobalDeny, "agent.yaml:3"},
      {"global_deny_wildcard_beats_exact_allow", "demo", tunnel("x.blocked.example.com"), kDeny,
       reason::kGlobalDeny, "agent.yaml:4"},
      {"policy_deny_beats_policy_allow", "demo", tunnel("gist.githubusercontent.com"), kDeny,
       reason::kDeniedByRule, "agent.yaml:25"},
      {"included_deny_beats_own_allow", "demo", tunnel("bad.npmjs.org"), kDeny,
       reason::kDeniedByRule, "agent.yaml:12"},
      {"policy_allow", "demo", tunnel("raw.githubusercontent.com"), kAllow, reason::kAllowed,
       "agent.yaml:20"},
      {"included_allow", "demo", tunnel("registry.npmjs.org"), kAllow, reason::kAllowed,
       "agent.yaml:10"},
      {"global_allow", "demo", tunnel("global-allowed.example.com"), kAllow, reason::kAllowed,
       "agent.yaml:5"},
      {"global_allow_applies_to_every_task", "npm-only", tunnel("global-allowed.example.com"),
       kAllow, reason::kAllowed, "agent.yaml:5"},
      {"default_deny", "demo", tunnel("example.org"), kDeny, reason::kNoMatchingRule, ""},
      {"includer_rules_do_not_leak_into_included", "npm-only", tunnel("raw.githubusercontent.com"),
       kDeny, reason::kNoMatchingRule, ""},
      {"unknown_task", "nobody", tunnel("registry.npmjs.org"), kDeny, reason::kUnknownTask, ""},
  };
  expectCases(*e, cases);
  EXPECT_TRUE(e->hasTask("demo"));
  EXPECT_FALSE(e->hasTask("nobody"));
}

TEST(PolicyEnginePrecedence, DetailSentences) {
  auto e = precedenceConfig().build();
  ASSERT_TRUE(e);
  Decision d = e->decide("demo", tunnel("gist.githubusercontent.com"));
  EXPECT_EQ(d.detail, "host gist.githubusercontent.com is denied by policies.agent.deny[0]");
  EXPECT_EQ(d.keyPath, "policies.agent.deny[0]");
  d = e->decide("demo", tunnel("evil.example.com"));
  EXPECT_EQ(d.detail, "host evil.example.com is denied by global.deny[0]");
  d = e->decide("demo", tunnel("example.org"));
  EXPECT_EQ(d.detail, "no rule of policy agent allows host example.org");
  d = e->decide("nobody", tunnel("example.org"));
  EXPECT_EQ(d.detail, "task \"nobody\" is not defined in the configuration");
  d = e->decide("demo", tunnel("raw.githubusercontent.com"));
  EXPECT_EQ(d.detail,
            "host raw.githubusercontent.com port 443 is allowed by policies.agent.allow[0]");
  EXPECT_NE(d.matched, nullptr);
}

TEST(PolicyEnginePrecedence, IncludesAreTransitiveAndDeduplicated) {
  Cfg c;
  c.policy("base").policy("a", {"base"}).policy("b", {"base"}).policy("top", {"a", "b"});
  c.allow("base", R(2).host("base.example.com"));
  c.deny("base", R(3).host("no.example.com"));
  c.allow("top", R(10).host("no.example.com"));
  c.task("t", "top");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(*e, {
                      {"two_levels_down_allow", "t", tunnel("base.example.com"), kAllow,
                       reason::kAllowed, "agent.yaml:2"},
                      {"two_levels_down_deny", "t", tunnel("no.example.com"), kDeny,
                       reason::kDeniedByRule, "agent.yaml:3"},
                  });
}

TEST(PolicyEnginePrecedence, IncludeCycleTerminates) {
  Cfg c;
  c.policy("a", {"b"}).policy("b", {"a"});
  c.allow("a", R(2).host("a.example.com"));
  c.allow("b", R(3).host("b.example.com"));
  c.task("t", "a");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(
      *e, {{"via_cycle", "t", tunnel("b.example.com"), kAllow, reason::kAllowed, "agent.yaml:3"}});
}

// decideUnder(): a policy on its own (an ad-hoc task of a task token) decides as a task of
// that policy does; with `tokens:` every policy is compiled, without it only the tasks' ones.
TEST(PolicyEnginePrecedence, DecideUnderAPolicyAsItsTasksDo) {
  Cfg c = precedenceConfig();
  c.policy("unused");
  c.allow("unused", R(40).host("unused.example.com"));
  auto plain = c.build();
  ASSERT_TRUE(plain);
  EXPECT_TRUE(plain->hasPolicy("agent"));
  EXPECT_FALSE(plain->hasPolicy("unused"));
  EXPECT_EQ(plain->decideUnder("unused", tunnel("unused.example.com")).reason,
            reason::kUnknownPolicy);

  config::Config withTokens = c.config();
  withTokens.tokens.emplace();
  auto compiled = Engine::compile(withTokens);
  ASSERT_TRUE(compiled.ok()) << compiled.errorText();
  const Engine& e = *compiled.value();
  EXPECT_TRUE(e.hasPolicy("unused"));
  EXPECT_TRUE(e.hasPolicy("npm"));  // only included by agent, yet a token may name it
  EXPECT_FALSE(e.hasTask("unused"));
  EXPECT_TRUE(e.decideUnder("unused", tunnel("unused.example.com")).allowed());
  EXPECT_EQ(e.decideUnder("unused", tunnel("raw.githubusercontent.com")).reason,
            reason::kNoMatchingRule);
  for (const char* host : {"evil.example.com", "gist.githubusercontent.com", "bad.npmjs.org",
                           "raw.githubusercontent.com", "registry.npmjs.org", "example.org"}) {
    Decision asTask = e.decide("demo", tunnel(host));
    Decision asPolicy = e.decideUnder("agent", tunnel(host));
    EXPECT_EQ(asPolicy.reason, asTask.reason) << host;
    EXPECT_EQ(asPolicy.rule, asTask.rule) << host;
  }
  EXPECT_EQ(e.decideUnder("global-allowed-only", tunnel("global-allowed.example.com")).reason,
            reason::kUnknownPolicy);
  EXPECT_TRUE(e.decideUnder("npm", tunnel("global-allowed.example.com")).allowed());
}

TEST(PolicyEnginePrecedence, FirstMatchingDenyInFileOrderIsReported) {
  Cfg c;
  c.deny("p", R(8).host("re:.*\\.example\\.com"));
  c.deny("p", R(4).host("*.example.com"));
  c.deny("p", R(6).host("a.example.com"));
  c.allow("p", R(2).host("a.example.com"));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(*e, {{"earliest_line", "t", tunnel("a.example.com"), kDeny, reason::kDeniedByRule,
                    "agent.yaml:4"}});
}

// ---------------------------------------------------------------------------------------------
// Specificity among allow rules: exact > wildcard (longest suffix first) > regex > cidrs.

TEST(PolicyEngineSpecificity, MostSpecificTierDecides) {
  Cfg c;
  c.allow("p", R(2).host("api.example.com").methods({"GET"}));
  c.allow("p", R(3).host("*.example.com").methods({"POST"}));
  c.allow("p", R(4).host("*.eu.example.com").methods({"PUT"}));
  c.allow("p", R(5).host("re:[a-z]+\\.example\\.com").methods({"DELETE"}));
  c.allow("p", R(6).host("re:.*\\.example\\.org").methods({"PATCH"}));
  c.allow("p", R(7).host("*.example.org").ports({8443}));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(
      *e,
      {
          {"exact_beats_wildcard", "t", visible("api.example.com", 443, "GET", "/"), kAllow,
           reason::kAllowed, "agent.yaml:2"},
          {"exact_restricts_even_if_wildcard_would_allow", "t",
           visible("api.example.com", 443, "POST", "/"), kDeny, reason::kMethodNotAllowed,
           "agent.yaml:2"},
          {"longer_suffix_beats_shorter", "t", visible("x.eu.example.com", 443, "PUT", "/"), kAllow,
           reason::kAllowed, "agent.yaml:4"},
          {"longer_suffix_restricts", "t", visible("x.eu.example.com", 443, "POST", "/"), kDeny,
           reason::kMethodNotAllowed, "agent.yaml:4"},
          {"wildcard_beats_regex", "t", visible("www.example.com", 443, "DELETE", "/"), kDeny,
           reason::kMethodNotAllowed, "agent.yaml:3"},
          {"wildcard_any_depth", "t", visible("a.b.c.example.com", 443, "POST", "/"), kAllow,
           reason::kAllowed, "agent.yaml:3"},
          {"wildcard_not_apex", "t", visible("example.com", 443, "POST", "/"), kDeny,
           reason::kNoMatchingRule, ""},
          {"regex_when_wildcard_has_no_port", "t", visible("www.example.org", 443, "PATCH", "/"),
           kAllow, reason::kAllowed, "agent.yaml:6"},
          {"wildcard_when_port_fits", "t", visible("www.example.org", 8443, "GET", "/"), kAllow,
           reason::kAllowed, "agent.yaml:7"},
      });
}

TEST(PolicyEngineSpecificity, RegexIsAnchoredFullMatch) {
  Cfg c;
  c.allow("p", R(2).host("re:api[0-9]\\.example\\.com"));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(
      *e, {
              {"match", "t", tunnel("api1.example.com"), kAllow, reason::kAllowed, "agent.yaml:2"},
              {"prefix_not_enough", "t", tunnel("api1.example.com.evil.net"), kDeny,
               reason::kNoMatchingRule, ""},
              {"suffix_not_enough", "t", tunnel("xapi1.example.com"), kDeny,
               reason::kNoMatchingRule, ""},
              {"regex_sees_normalised_host", "t", tunnel("API1.Example.COM."), kAllow,
               reason::kAllowed, "agent.yaml:2"},
          });
}

// ---------------------------------------------------------------------------------------------
// Ports, methods and paths.

TEST(PolicyEngineRules, PortsMethodsPaths) {
  Cfg c;
  c.allow("p", R(2).host("default-port.example.com"));
  c.allow("p", R(3).host("ports.example.com").ports({80, 8080}));
  c.allow("p", R(4).host("api.example.com").methods({"GET", "POST"}).paths({"/v1/**", "/health"}));
  c.allow("p", R(5).host("glob.example.com").paths({"/repos/*/issues"}));
  c.deny("p", R(6).host("ports.example.com").ports({8080}));
  c.deny("p", R(7).host("default-port.example.com"));  // no ports: every port
  c.allow("q", R(8).host("default-port.example.com").ports({22}));
  c.task("t", "p").task("u", "q");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(
      *e,
      {
          {"deny_without_ports_covers_443", "t", tunnel("default-port.example.com"), kDeny,
           reason::kDeniedByRule, "agent.yaml:7"},
          {"allow_default_is_443_only", "u", tunnel("default-port.example.com", 443), kDeny,
           reason::kPortNotAllowed, "agent.yaml:8"},
          {"allow_explicit_port", "u", tunnel("default-port.example.com", 22), kAllow,
           reason::kAllowed, "agent.yaml:8"},
          {"port_listed", "t", tunnel("ports.example.com", 80), kAllow, reason::kAllowed,
           "agent.yaml:3"},
          {"port_not_listed", "t", tunnel("ports.example.com", 443), kDeny, reason::kPortNotAllowed,
           "agent.yaml:3"},
          {"deny_on_one_port", "t", tunnel("ports.example.com", 8080), kDeny, reason::kDeniedByRule,
           "agent.yaml:6"},
          {"method_and_path_ok", "t", visible("api.example.com", 443, "POST", "/v1/chat"), kAllow,
           reason::kAllowed, "agent.yaml:4"},
          {"second_path", "t", visible("api.example.com", 443, "GET", "/health"), kAllow,
           reason::kAllowed, "agent.yaml:4"},
          {"query_is_not_part_of_path", "t", visible("api.example.com", 443, "GET", "/health?x=1"),
           kAllow, reason::kAllowed, "agent.yaml:4"},
          {"method_not_allowed", "t", visible("api.example.com", 443, "DELETE", "/v1/chat"), kDeny,
           reason::kMethodNotAllowed, "agent.yaml:4"},
          {"method_case_sensitive", "t", visible("api.example.com", 443, "get", "/v1/chat"), kDeny,
           reason::kMethodNotAllowed, "agent.yaml:4"},
          {"path_not_allowed", "t", visible("api.example.com", 443, "GET", "/admin"), kDeny,
           reason::kPathNotAllowed, "agent.yaml:4"},
          {"dot_dot_refused", "t", visible("api.example.com", 443, "GET", "/v1/../admin"), kDeny,
           reason::kPathAmbiguous, "agent.yaml:4"},
          {"encoded_dot_dot_refused", "t", visible("api.example.com", 443, "GET", "/v1/%2e%2e/x"),
           kDeny, reason::kPathAmbiguous, "agent.yaml:4"},
          {"star_one_segment", "t", visible("glob.example.com", 443, "GET", "/repos/a/issues"),
           kAllow, reason::kAllowed, "agent.yaml:5"},
          {"star_not_two_segments", "t",
           visible("glob.example.com", 443, "GET", "/repos/a/b/issues"), kDeny,
           reason::kPathNotAllowed, "agent.yaml:5"},
          {"connect_to_l7_host_is_admitted", "t", tunnel("api.example.com"), kAllow,
           reason::kAllowed, "agent.yaml:4"},
      });
  Decision d = e->decide("t", visible("api.example.com", 443, "DELETE", "/v1/chat"));
  EXPECT_EQ(d.detail,
            "method DELETE is not allowed for host api.example.com by policies.p.allow[2] "
            "(methods: GET, POST)");
  d = e->decide("t", tunnel("ports.example.com", 443));
  EXPECT_EQ(d.detail,
            "port 443 is not allowed for host ports.example.com by policies.p.allow[1] (ports: 80, "
            "8080)");
}

// Paths an upstream may read as another path: a rule with `paths` cannot decide them, whatever
// its patterns (Tomcat, Spring and Jetty read /v1/..;/admin as /admin, which /v1/** would
// never admit). A rule without paths still admits them: it does not look at the path.
TEST(PolicyEngineRules, AmbiguousPathsAreRefusedWhereAPathRuleDecides) {
  Cfg c;
  c.allow("p", R(2).host("api.example.com").methods({"GET"}).paths({"/v1/**"}));
  c.allow("p", R(3).host("open.example.com"));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  const char* ambiguous[] = {
      "/v1/..;/admin",  "/v1/;/x",          "/v1/a;jsessionid=1", "/v1/..",
      "/v1/./x",        "/v1/../admin",     "/v1/%2e%2e/admin",   "/v1/%2E%2e/admin",
      "/v1/.%2e/admin", "/v1/%2e/x",        "/v1/%2E/x",          "/v1/..%2fadmin",
      "/v1/x%2Fy",      "/v1/x%5cy",        "/v1/x%5C..%5Cadmin", "/v1\\..\\admin",
      "/v1/x%3b/y",     "/v1/%c0%ae%c0%ae", "/v1/%u002e%u002e",   "/v1/%2",
  };
  for (const char* path : ambiguous) {
    SCOPED_TRACE(path);
    Decision d = e->decide("t", visible("api.example.com", 443, "GET", path));
    EXPECT_EQ(d.verdict, kDeny);
    EXPECT_EQ(d.reason, reason::kPathAmbiguous);
    EXPECT_EQ(d.rule, "agent.yaml:2");
    EXPECT_EQ(e->decide("t", visible("open.example.com", 443, "GET", path)).verdict, kAllow);
  }
  expectCases(*e, {
                      {"normal_path", "t", visible("api.example.com", 443, "GET", "/v1/a/b"),
                       kAllow, reason::kAllowed, "agent.yaml:2"},
                      {"dots_inside_a_name", "t",
                       visible("api.example.com", 443, "GET", "/v1/a..b/.well-known"), kAllow,
                       reason::kAllowed, "agent.yaml:2"},
                      {"other_escape", "t", visible("api.example.com", 443, "GET", "/v1/a%20b"),
                       kAllow, reason::kAllowed, "agent.yaml:2"},
                      {"normal_but_outside", "t", visible("api.example.com", 443, "GET", "/admin"),
                       kDeny, reason::kPathNotAllowed, "agent.yaml:2"},
                  });
}

// Method and URL override headers are refused where a rule with methods or paths admits the
// request, and ignored where no such rule is involved.
TEST(PolicyEngineRules, OverrideHeadersOnRestrictedRules) {
  Cfg c;
  c.allow("p", R(2).host("api.example.com").methods({"GET"}));
  c.allow("p", R(3).host("paths.example.com").paths({"/v1/**"}));
  c.allow("p", R(4).host("open.example.com"));
  c.allow("p", R(5).host("audit.example.com").methods({"GET"}).audit());
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  struct OverrideCase {
    const char* name;
    const char* host;
    const char* header;
    Verdict verdict;
    std::string_view reason;
  };
  const OverrideCase cases[] = {
      {"method_override", "api.example.com", "X-HTTP-Method-Override", kDeny,
       reason::kOverrideHeader},
      {"method_override_lower", "api.example.com", "x-http-method-override", kDeny,
       reason::kOverrideHeader},
      {"x_http_method", "api.example.com", "X-HTTP-Method", kDeny, reason::kOverrideHeader},
      {"x_method_override", "api.example.com", "X-Method-Override", kDeny, reason::kOverrideHeader},
      {"original_url", "paths.example.com", "X-Original-URL", kDeny, reason::kOverrideHeader},
      {"rewrite_url", "paths.example.com", "X-REWRITE-URL", kDeny, reason::kOverrideHeader},
      {"unrestricted_rule", "open.example.com", "X-HTTP-Method-Override", kAllow, reason::kAllowed},
      {"audit_rule", "audit.example.com", "X-HTTP-Method-Override", Verdict::kAudit,
       reason::kOverrideHeader},
  };
  for (const auto& oc : cases) {
    SCOPED_TRACE(oc.name);
    ASSERT_TRUE(isOverrideHeader(oc.header));
    Request r = visible(oc.host, 443, "GET", "/v1/x");
    r.overrideHeader = oc.header;
    Decision d = e->decide("t", r);
    EXPECT_EQ(d.verdict, oc.verdict) << d.detail;
    EXPECT_EQ(d.reason, oc.reason);
    // Without the header the same request is allowed.
    r.overrideHeader.reset();
    EXPECT_EQ(e->decide("t", r).reason, reason::kAllowed);
  }
  EXPECT_FALSE(isOverrideHeader("X-HTTP-Method-Overrid"));
  EXPECT_FALSE(isOverrideHeader("X-Forwarded-For"));
  EXPECT_FALSE(isOverrideHeader(""));
}

TEST(PolicyEngineRules, DenyWithMethodsOrPathsNeedsAVisibleRequest) {
  Cfg c;
  c.allow("p", R(2).host("api.example.com"));
  c.deny("p", R(3).host("api.example.com").methods({"DELETE"}));
  c.deny("p", R(4).host("api.example.com").paths({"/admin/**"}));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(
      *e, {
              {"connect_admitted", "t", tunnel("api.example.com"), kAllow, reason::kAllowed,
               "agent.yaml:2"},
              {"visible_other_method", "t", visible("api.example.com", 443, "GET", "/x"), kAllow,
               reason::kAllowed, "agent.yaml:2"},
              {"visible_denied_method", "t", visible("api.example.com", 443, "DELETE", "/x"), kDeny,
               reason::kDeniedByRule, "agent.yaml:3"},
              {"visible_denied_path", "t", visible("api.example.com", 443, "GET", "/admin/users"),
               kDeny, reason::kDeniedByRule, "agent.yaml:4"},
              // A path we cannot judge must not walk around a deny rule.
              {"non_normal_path_hits_path_deny", "t",
               visible("api.example.com", 443, "GET", "/x/../admin/users"), kDeny,
               reason::kPathAmbiguous, "agent.yaml:4"},
          });
  // The CONNECT must be intercepted, or the deny rules could never apply.
  EXPECT_TRUE(e->decide("t", tunnel("api.example.com")).intercept);
}

// ---------------------------------------------------------------------------------------------
// Interception.

TEST(PolicyEngineIntercept, Flag) {
  Cfg c;
  c.credential("openai");
  c.allow("p", R(2).host("plain.example.com"));
  c.allow("p", R(3).host("cred.example.com").credential("openai"));
  c.allow("p", R(4).host("methods.example.com").methods({"GET"}));
  c.allow("p", R(5).host("paths.example.com").paths({"/a"}));
  c.allow("p", R(6).host("inspect.example.com").inspect());
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  struct Want {
    const char* host;
    bool intercept;
    const char* credential;
  };
  const Want wants[] = {
      {"plain.example.com", false, ""},  {"cred.example.com", true, "openai"},
      {"methods.example.com", true, ""}, {"paths.example.com", true, ""},
      {"inspect.example.com", true, ""},
  };
  for (const auto& w : wants) {
    SCOPED_TRACE(w.host);
    Decision d = e->decide("t", tunnel(w.host));
    ASSERT_EQ(d.verdict, kAllow) << d.detail;
    EXPECT_EQ(d.intercept, w.intercept);
    EXPECT_EQ(d.credential, w.credential);
  }
}

// ---------------------------------------------------------------------------------------------
// Audit mode.

TEST(PolicyEngineAudit, WouldBeRefusalsAreAllowedAndNamed) {
  Cfg c;
  c.deny("p", R(2).host("audited.example.com").audit());
  c.allow("p", R(3).host("audited.example.com"));
  c.allow("p", R(4).host("api.example.com").methods({"GET"}).audit());
  c.allow("p", R(5).host("ports.example.com").audit());
  c.deny("p", R(6).host("both.example.com").audit());
  c.deny("p", R(7).host("both.example.com"));
  c.allow("p", R(8).host("both.example.com"));
  c.deny("global", R(9).host("g.example.com").audit());
  c.allow("p", R(10).host("g.example.com"));
  c.deny("p", R(11).host("unallowed.example.com").audit());
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(*e, {
                      {"audit_deny_lets_through", "t", tunnel("audited.example.com"), kAudit,
                       reason::kDeniedByRule, "agent.yaml:2"},
                      {"audit_global_deny", "t", tunnel("g.example.com"), kAudit,
                       reason::kGlobalDeny, "agent.yaml:9"},
                      {"audit_allow_method", "t", visible("api.example.com", 443, "POST", "/"),
                       kAudit, reason::kMethodNotAllowed, "agent.yaml:4"},
                      {"audit_allow_method_ok_is_plain_allow", "t",
                       visible("api.example.com", 443, "GET", "/"), kAllow, reason::kAllowed,
                       "agent.yaml:4"},
                      {"audit_allow_port", "t", tunnel("ports.example.com", 22), kAudit,
                       reason::kPortNotAllowed, "agent.yaml:5"},
                      {"enforced_deny_after_audit_deny_wins", "t", tunnel("both.example.com"),
                       kDeny, reason::kDeniedByRule, "agent.yaml:7"},
                      {"audit_deny_without_allow_is_still_default_deny", "t",
                       tunnel("unallowed.example.com"), kDeny, reason::kNoMatchingRule, ""},
                  });
  Decision d = e->decide("t", tunnel("audited.example.com"));
  EXPECT_NE(d.matched, nullptr);  // the allow rule that actually admitted it
  EXPECT_NE(d.detail.find("policies.p.deny[0] is in audit mode"), std::string::npos) << d.detail;
}

TEST(PolicyEngineAudit, NeverRelaxesAddressChecks) {
  Cfg c;
  c.allow("p", R(2).host("127.0.0.1").audit());
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(*e, {{"audit_rule_still_address_denied", "t", tunnel("127.0.0.1", 22), kDeny,
                    reason::kAddressDenied, ""}});
}

// ---------------------------------------------------------------------------------------------
// Credentials: load-time ties and run-time conflicts.

TEST(PolicyEngineCredentials, TwoRegexesWithDifferentCredentialsConflictAtRunTime) {
  Cfg c;
  c.credential("a").credential("b");
  c.allow("p", R(2).host("re:api\\..*").credential("a"));
  c.allow("p", R(3).host("re:(api|www)\\.example\\.com").credential("b"));
  c.allow("p", R(4).host("re:x[0-9]\\.example\\.com").methods({"GET"}).credential("a"));
  c.allow("p", R(5).host("re:x[0-9]\\..*").methods({"POST"}).credential("b"));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(
      *e,
      {
          {"both_match", "t", tunnel("api.example.com"), kDeny, reason::kCredentialConflict,
           "agent.yaml:2"},
          {"only_first", "t", tunnel("api.example.org"), kAllow, reason::kAllowed, "agent.yaml:2"},
          {"only_second", "t", tunnel("www.example.com"), kAllow, reason::kAllowed, "agent.yaml:3"},
          // Rules that differ by method: the CONNECT is intercepted and each request picks.
          {"connect_by_method", "t", tunnel("x1.example.com"), kAllow, reason::kAllowed,
           "agent.yaml:4"},
          {"get_picks_first", "t", visible("x1.example.com", 443, "GET", "/"), kAllow,
           reason::kAllowed, "agent.yaml:4"},
          {"post_picks_second", "t", visible("x1.example.com", 443, "POST", "/"), kAllow,
           reason::kAllowed, "agent.yaml:5"},
      });
  Decision d = e->decide("t", tunnel("x1.example.com"));
  EXPECT_TRUE(d.intercept);
  EXPECT_EQ(d.credential, "");
  EXPECT_EQ(e->decide("t", visible("x1.example.com", 443, "GET", "/")).credential, "a");
  EXPECT_EQ(e->decide("t", visible("x1.example.com", 443, "POST", "/")).credential, "b");
}

// ---------------------------------------------------------------------------------------------
// IP-literal targets and checkAddress().

TEST(PolicyEngineAddresses, IpLiteralTargets) {
  Cfg c;
  c.allow("p", R(2).host("127.0.0.1").ports({8080}));
  c.allow("p", R(3).cidrs({"127.0.0.0/8"}).ports({9000}));
  c.allow("p", R(4).cidrs({"203.0.113.0/24", "198.51.100.7"}));
  c.allow("p", R(5).host("93.184.216.34"));
  c.allow("p", R(6).host("*.example.com"));
  c.allow("p", R(7).host("re:.*"));
  c.allow("p", R(8).cidrs({"10.0.0.0/8"}).ports({22}));
  c.allow("p", R(9).cidrs({"10.1.0.0/16"}).ports({22}).methods({"GET"}));
  c.deny("global", R(10).cidrs({"10.9.0.0/16"}));
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  expectCases(
      *e,
      {
          {"exact_ip_rule_without_cidrs_is_address_denied", "t", tunnel("127.0.0.1", 8080), kDeny,
           reason::kAddressDenied, ""},
          {"decimal_spelling_same", "t", tunnel("2130706433", 8080), kDeny, reason::kAddressDenied,
           ""},
          {"cidrs_rule_allows_loopback", "t", tunnel("127.0.0.1", 9000), kAllow, reason::kAllowed,
           "agent.yaml:3"},
          {"cidrs_rule_hex_spelling", "t", tunnel("0x7f.1", 9000), kAllow, reason::kAllowed,
           "agent.yaml:3"},
          {"cidrs_rule_octal_spelling", "t", tunnel("0177.0.0.1", 9000), kAllow, reason::kAllowed,
           "agent.yaml:3"},
          {"mapped_v6_covered_by_v4_cidr", "t", tunnel("[::ffff:127.0.0.1]", 9000), kAllow,
           reason::kAllowed, "agent.yaml:3"},
          {"cidrs_rule_documentation_range", "t", tunnel("203.0.113.5"), kAllow, reason::kAllowed,
           "agent.yaml:4"},
          {"cidrs_single_address", "t", tunnel("198.51.100.7"), kAllow, reason::kAllowed,
           "agent.yaml:4"},
          {"documentation_neighbour_no_rule", "t", tunnel("198.51.100.8"), kDeny,
           reason::kAddressDenied, ""},
          {"exact_public_ip", "t", tunnel("93.184.216.34"), kAllow, reason::kAllowed,
           "agent.yaml:5"},
          {"exact_public_ip_decimal", "t", tunnel("1572395042"), kAllow, reason::kAllowed,
           "agent.yaml:5"},
          {"regex_never_matches_ip", "t", tunnel("8.8.8.8"), kDeny, reason::kNoMatchingRule, ""},
          // A denied range is the reason that matters, unless a matching rule's cidrs cover it.
          {"loopback_exact_rule_other_port_cidr_rule_covers", "t", tunnel("2130706433", 443), kDeny,
           reason::kPortNotAllowed, "agent.yaml:2"},
          {"private_no_rule", "t", tunnel("192.168.1.1", 443), kDeny, reason::kAddressDenied, ""},
          {"public_exact_rule_other_port", "t", tunnel("93.184.216.34", 8443), kDeny,
           reason::kPortNotAllowed, "agent.yaml:5"},
          {"loopback_range_rule_other_port", "t", tunnel("127.0.0.2", 443), kDeny,
           reason::kPortNotAllowed, "agent.yaml:3"},
          {"connect_loopback_v6_unmatched", "t", tunnel("[::1]", 443), kDeny,
           reason::kAddressDenied, ""},
          {"connect_mapped_private_unmatched", "t", tunnel("[::ffff:192.168.1.1]", 443), kDeny,
           reason::kAddressDenied, ""},
          {"longest_prefix_first", "t", visible("10.1.2.3", 22, "GET", "/"), kAllow,
           reason::kAllowed, "agent.yaml:9"},
          {"longest_prefix_restricts", "t", visible("10.1.2.3", 22, "POST", "/"), kDeny,
           reason::kMethodNotAllowed, "agent.yaml:9"},
          {"shorter_prefix_elsewhere", "t", visible("10.2.0.1", 22, "POST", "/"), kAllow,
           reason::kAllowed, "agent.yaml:8"},
          {"global_deny_cidr", "t", tunnel("10.9.1.1", 22), kDeny, reason::kGlobalDeny,
           "agent.yaml:10"},
      });
  Decision d = e->decide("t", tunnel("2130706433", 8080));
  EXPECT_EQ(d.detail,
            "127.0.0.1 is loopback; policies.p.allow[0] admits the host but names no cidrs "
            "covering it");
  d = e->decide("t", tunnel("192.168.1.1", 443));
  EXPECT_EQ(d.detail, "192.168.1.1 is private; no rule that matches it names cidrs covering it");
}

TEST(PolicyEngineAddresses, CheckAddress) {
  Cfg c;
  c.allow("p", R(2).host("api.example.com"));
  c.allow("p", R(3).host("test-upstream.local").cidrs({"127.0.0.0/8"}).ports({8443}));
  c.allow("p", R(4).host("meta.example.com").cidrs({"10.0.0.0/8"}));
  c.deny("p", R(5).cidrs({"203.0.113.0/24"}));
  c.deny("global", R(6).cidrs({"8.8.8.0/24"}).audit());
  c.task("t", "p");
  auto e = c.build();
  ASSERT_TRUE(e);
  struct AddrCase {
    const char* name;
    const char* host;
    uint16_t port;
    const char* addr;
    Verdict verdict;
    std::string_view reason;
    const char* detailPrefix;
  };
  const AddrCase cases[] = {
      {"public_ok", "api.example.com", 443, "93.184.216.34", kAllow, reason::kAllowed, "host"},
      {"loopback_refused", "api.example.com", 443, "127.0.0.1", kDeny, reason::kAddressDenied,
       "127.0.0.1 is loopback"},
      {"metadata_refused", "api.example.com", 443, "169.254.169.254", kDeny, reason::kAddressDenied,
       "169.254.169.254 is cloud_metadata"},
      {"private_refused", "api.example.com", 443, "10.1.2.3", kDeny, reason::kAddressDenied,
       "10.1.2.3 is private"},
      {"mapped_refused", "api.example.com", 443, "::ffff:127.0.0.1", kDeny, reason::kAddressDenied,
       "::ffff:127.0.0.1 is loopback (it embeds 127.0.0.1 as ipv4-mapped)"},
      {"nat64_metadata_refused", "api.example.com", 443, "64:ff9b::a9fe:a9fe", kDeny,
       reason::kAddressDenied, "64:ff9b::a9fe:a9fe is cloud_metadata"},
      {"ula_refused", "api.example.com", 443, "fd00::1", kDeny, reason::kAddressDenied,
       "fd00::1 is unique_local"},
      {"covered_by_rule_cidr", "test-upstream.local", 8443, "127.0.0.1", kAllow, reason::kAllowed,
       "host"},
      {"covered_mapped", "test-upstream.local", 8443, "::ffff:127.0.0.1", kAllow, reason::kAllowed,
       "host"},
      {"cidr_does_not_cover_metadata", "meta.example.com", 443, "169.254.169.254", kDeny,
       reason::kAddressDenied, "169.254.169.254 is cloud_metadata"},
      {"policy_deny_cidr_applies_to_resolved", "api.example.com", 443, "203.0.113.9", kDeny,
       reason::kDeniedByRule, "address 203.0.113.9 is denied by policies.p.deny[0]"},
      {"audit_global_deny_cidr", "api.example.com", 443, "8.8.8.8", kAudit, reason::kGlobalDeny,
       "would be refused: address 8.8.8.8"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Decision allowed = e->decide("t", tunnel(c.host, c.port));
    ASSERT_EQ(allowed.verdict, kAllow) << allowed.detail;
    Decision d = e->checkAddress(allowed, *parseIp(c.addr));
    EXPECT_EQ(verdictName(d.verdict), verdictName(c.verdict)) << d.detail;
    EXPECT_EQ(d.reason, c.reason) << d.detail;
    EXPECT_EQ(d.detail.rfind(c.detailPrefix, 0), 0u) << d.detail;
    if (c.verdict == kAllow) {
      EXPECT_EQ(d.rule, allowed.rule);
    }
  }
  // A refusal is passed through unchanged.
  Decision refused = e->decide("t", tunnel("nowhere.example.com"));
  Decision again = e->checkAddress(refused, *parseIp("8.8.8.8"));
  EXPECT_EQ(again.reason, reason::kNoMatchingRule);
}

}  // namespace
}  // namespace sandgate::policy
