// Tests of reading rules, policies and global rules into the typed model.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::Expected;
using testing::expectOne;
using testing::loadErrors;
using testing::loadOk;

TEST(RuleReader, EveryFieldLandsInTheModel) {
  auto c = loadOk(
      "credentials:\n"
      "  k:\n"
      "    source: {env: K}\n"
      "    hosts: [api.example.com]\n"
      "    inject: {header: X-Key}\n"
      "policies:\n"
      "  p:\n"
      "    allow:\n"
      "      - host: api.example.com\n"
      "        cidrs: [10.0.0.0/8, \"::1/128\"]\n"
      "        ports: [443, 8443]\n"
      "        methods: [GET, POST]\n"
      "        paths: [/v1/*, \"re:^/v2/.*$\"]\n"
      "        credential: k\n"
      "        mode: audit\n"
      "        inspect: true\n");
  const Rule& r = c.policies.at("p").allow.at(0);
  EXPECT_EQ(r.keyPath, "policies.p.allow[0]");
  EXPECT_EQ(r.mark.line, 9);
  EXPECT_EQ(r.mark.col, 9);
  ASSERT_TRUE(r.host.has_value());
  EXPECT_EQ(r.host->value, "api.example.com");
  EXPECT_EQ(r.host->mark.line, 9);
  EXPECT_EQ(r.host->mark.col, 15);
  ASSERT_EQ(r.cidrs.size(), 2u);
  EXPECT_EQ(r.cidrs[1].value, "::1/128");
  ASSERT_EQ(r.ports.size(), 2u);
  EXPECT_EQ(r.ports[0].value, 443);
  EXPECT_EQ(r.ports[1].value, 8443);
  EXPECT_EQ(r.ports[1].mark.line, 11);
  EXPECT_EQ(r.ports[1].mark.col, 22);
  ASSERT_EQ(r.methods.size(), 2u);
  EXPECT_EQ(r.methods[1].value, "POST");
  ASSERT_EQ(r.paths.size(), 2u);
  EXPECT_EQ(r.paths[1].value, "re:^/v2/.*$");
  ASSERT_TRUE(r.credential.has_value());
  EXPECT_EQ(r.credential->value, "k");
  EXPECT_EQ(r.mode, RuleMode::kAudit);
  EXPECT_TRUE(r.inspect);
}

TEST(RuleReader, DefaultsWhenKeysAreOmitted) {
  auto c = loadOk("policies:\n  p:\n    deny:\n      - host: a.example\n");
  const Rule& r = c.policies.at("p").deny.at(0);
  EXPECT_EQ(r.keyPath, "policies.p.deny[0]");
  EXPECT_TRUE(r.ports.empty());
  EXPECT_TRUE(r.methods.empty());
  EXPECT_TRUE(r.paths.empty());
  EXPECT_TRUE(r.cidrs.empty());
  EXPECT_FALSE(r.credential.has_value());
  EXPECT_EQ(r.mode, RuleMode::kEnforce);
  EXPECT_FALSE(r.inspect);
}

TEST(RuleReader, CidrsAloneIsARule) {
  auto c = loadOk("global:\n  allow:\n    - cidrs: [127.0.0.1/32]\n      ports: [8080]\n");
  ASSERT_EQ(c.global.allow.size(), 1u);
  EXPECT_FALSE(c.global.allow[0].host.has_value());
  EXPECT_EQ(c.global.allow[0].keyPath, "global.allow[0]");
}

TEST(RuleReader, PolicyStructure) {
  auto c = loadOk(
      "policies:\n"
      "  base: {}\n"
      "  p:\n"
      "    include: [base]\n"
      "    allow: []\n"
      "    deny:\n"  // empty value: no rules
      "  q:\n"
      "    allow:\n"
      "      - host: a.example\n"
      "      - host: b.example\n");
  EXPECT_EQ(c.policies.size(), 3u);
  const Policy& p = c.policies.at("p");
  EXPECT_EQ(p.name, "p");
  EXPECT_EQ(p.mark.line, 3);
  ASSERT_EQ(p.include.size(), 1u);
  EXPECT_EQ(p.include[0].value, "base");
  EXPECT_EQ(p.include[0].mark.line, 4);
  EXPECT_TRUE(p.allow.empty());
  EXPECT_TRUE(p.deny.empty());
  ASSERT_EQ(c.policies.at("q").allow.size(), 2u);
  EXPECT_EQ(c.policies.at("q").allow[1].keyPath, "policies.q.allow[1]");
  EXPECT_EQ(c.policies.at("q").allow[1].mark.line, 10);
}

TEST(RuleReader, Errors) {
  struct Case {
    const char* name;
    const char* rule;  // one rule, written as the only item of policies.p.allow
    Expected want;
  };
  // Every rule starts on line 4 at column 9: "policies:\n  p:\n    allow:\n      - ".
  const Case cases[] = {
      {"unknown key with hint",
       "hots: a.example",
       {4, 9, "policies.p.allow[0].hots", "unknown key `hots`; did you mean `host`?"}},
      {"unknown key without hint",
       "host: a.example\n        comment: hi",
       {5, 9, "policies.p.allow[0].comment", "unknown key `comment`; expected one of: host"}},
      {"host is a list",
       "host: [a, b]",
       {4, 15, "policies.p.allow[0].host", "expected a host name or pattern, got a list"}},
      {"port zero",
       "host: a\n        ports: [0]",
       {5, 17, "policies.p.allow[0].ports[0]", "expected an integer from 1 to 65535, got `0`"}},
      {"port name",
       "host: a\n        ports: [https]",
       {5, 17, "policies.p.allow[0].ports[0]", "got `https`"}},
      {"methods scalar",
       "host: a\n        methods: GET",
       {5, 18, "policies.p.allow[0].methods", "expected a list of strings, e.g. [GET, POST]"}},
      {"paths empty",
       "host: a\n        paths: []",
       {5, 16, "policies.p.allow[0].paths", "empty list"}},
      {"cidrs empty item",
       "cidrs: [\"\"]",
       {4, 17, "policies.p.allow[0].cidrs[0]", "empty value; expected a string"}},
      {"mode empty",
       "host: a\n        mode:",
       {5, 9, "policies.p.allow[0].mode", "empty value; expected enforce or audit"}},
      {"inspect string",
       "host: a\n        inspect: \"maybe\"",
       {5, 18, "policies.p.allow[0].inspect", "expected true or false, got `maybe`"}},
      {"rule is a string",
       "a.example",
       {4, 9, "policies.p.allow[0]",
        "expected a rule (a map with `host` or `cidrs`), got `a.example`"}},
      {"only ports",
       "ports: [443]",
       {4, 9, "policies.p.allow[0]", "a rule needs `host` or `cidrs`"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expectOne(loadErrors(std::string("policies:\n  p:\n    allow:\n      - ") + c.rule + "\n"),
              c.want);
  }
}

TEST(RuleReader, UnrelatedUnknownKeyStillReportsMissingHost) {
  // Only a near miss for `host`/`cidrs` silences "needs host or cidrs"; `comment` is not one.
  auto errors = loadErrors("policies:\n  p:\n    allow:\n      - comment: x\n");
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].keyPath, "policies.p.allow[0].comment");
  EXPECT_EQ(errors[1].message, "a rule needs `host` or `cidrs`");
}

TEST(RuleReader, PolicyErrors) {
  struct Case {
    const char* name;
    const char* yaml;
    Expected want;
  };
  const Case cases[] = {
      {"policy is a list",
       "policies:\n  p: [a]\n",
       {2, 6, "policies.p",
        "expected a policy (a map with include, allow, deny, budgets), got a list"}},
      {"policy is empty",
       "policies:\n  p:\n",
       {2, 3, "policies.p", "empty value; expected a policy"}},
      {"policies is a list",
       "policies: [a]\n",
       {1, 11, "policies", "expected a map of policy names to policies, got a list"}},
      {"bad policy name",
       "policies:\n  \"a b\": {}\n",
       {2, 3, "policies[\"a b\"]", "invalid name `a b`"}},
      {"include item is a map",
       "policies:\n  p:\n    include: [{a: 1}]\n",
       {3, 15, "policies.p.include[0]", "expected a policy name, got a map"}},
      {"global unknown key",
       "global:\n  alow: []\n",
       {2, 3, "global.alow", "unknown key `alow`; did you mean `allow`?"}},
      {"global rule list is a map",
       "global:\n  deny: {host: a}\n",
       {2, 9, "global.deny", "expected a list of rules, got a map"}},
      {"credential in global deny",
       "global:\n  deny:\n    - host: a\n      credential: k\n",
       {4, 7, "global.deny[0].credential", "a deny rule cannot name a credential"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expectOne(loadErrors(c.yaml), c.want);
  }
}

TEST(RuleReader, AGitBlockLandsInTheModel) {
  auto c = loadOk(
      "policies:\n"
      "  p:\n"
      "    allow:\n"
      "      - host: github.com\n"
      "        git:\n"
      "          repositories: [acme/widgets, \"acme/tools-*\"]\n"
      "          fetch: false\n"
      "          push:\n"
      "            refs: [\"refs/heads/agent/*\"]\n"
      "            delete: true\n"
      "            tags: true\n"
      "      - host: gitlab.com\n"
      "        git: {repositories: [g/p]}\n");
  const Rule& r = c.policies.at("p").allow.at(0);
  ASSERT_TRUE(r.git.has_value());
  EXPECT_EQ(r.git->mark.line, 5);
  ASSERT_EQ(r.git->repositories.size(), 2u);
  EXPECT_EQ(r.git->repositories[1].value, "acme/tools-*");
  EXPECT_EQ(r.git->repositories[1].mark.line, 6);
  EXPECT_FALSE(r.git->fetch);
  ASSERT_TRUE(r.git->push.has_value());
  ASSERT_EQ(r.git->push->refs.size(), 1u);
  EXPECT_EQ(r.git->push->refs[0].value, "refs/heads/agent/*");
  EXPECT_TRUE(r.git->push->allowDelete);
  EXPECT_TRUE(r.git->push->tags);
  // The defaults: fetch allowed, no push at all.
  const Rule& d = c.policies.at("p").allow.at(1);
  ASSERT_TRUE(d.git.has_value());
  EXPECT_TRUE(d.git->fetch);
  EXPECT_FALSE(d.git->push.has_value());
  EXPECT_FALSE(c.policies.at("p").allow.at(0).inspect);
}

TEST(RuleReader, GitBlockMistakes) {
  expectOne(loadErrors("policies:\n  p:\n    allow:\n      - host: a.com\n"
                       "        git: {fetch: true}\n"),
            Expected{5, 9, "policies.p.allow[0].git", "missing required key `repositories`"});
  expectOne(loadErrors("policies:\n  p:\n    allow:\n      - host: a.com\n"
                       "        git: {repositories: [a/b], push: {ref: [refs/heads/x]}}\n"),
            Expected{5, 43, "policies.p.allow[0].git.push.ref",
                     "unknown key `ref`; did you mean `refs`?"});
  expectOne(loadErrors("policies:\n  p:\n    deny:\n      - host: a.com\n"
                       "        git: {repositories: [a/b]}\n"),
            Expected{5, 9, "policies.p.deny[0].git", "a deny rule cannot have a git block"});
}

}  // namespace
}  // namespace sandgate::config
