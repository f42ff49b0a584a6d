// Tests of reading `credentials:`: sources, injections, options and their errors.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::Expected;
using testing::expectOne;
using testing::loadErrors;
using testing::loadOk;

// A credential `c` whose body lines are `body` (each indented by four spaces).
std::string credential(const std::string& body) { return "credentials:\n  c:\n" + body; }

TEST(CredentialReader, FileSourceHeaderInjectionAndOptions) {
  auto cfg =
      loadOk(credential("    source: {file: /run/secrets/k}\n"
                        "    hosts: [api.example.com, \"*.example.org\"]\n"
                        "    inject: {header: Authorization, value: \"Bearer {secret}\"}\n"
                        "    placeholder: EXAMPLE_KEY\n"
                        "    optional: true\n"
                        "    allow_plaintext: true\n"
                        "    scrub: false\n"
                        "    upstream_ca: /etc/ca.pem\n"));
  const Credential& c = cfg.credentials.at("c");
  EXPECT_EQ(c.name, "c");
  EXPECT_EQ(c.mark.line, 2);
  EXPECT_EQ(c.source.kind, CredentialSource::Kind::kFile);
  EXPECT_EQ(c.source.file, "/run/secrets/k");
  EXPECT_EQ(c.source.mark.line, 3);
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[1].value, "*.example.org");
  EXPECT_EQ(c.inject.kind, Injection::Kind::kHeader);
  EXPECT_EQ(c.inject.header, "Authorization");
  EXPECT_EQ(c.inject.value, "Bearer {secret}");
  EXPECT_EQ(c.placeholder, "EXAMPLE_KEY");
  EXPECT_TRUE(c.optional);
  EXPECT_TRUE(c.allowPlaintext);
  EXPECT_FALSE(c.scrub);
  EXPECT_EQ(c.upstreamCa, "/etc/ca.pem");
}

TEST(CredentialReader, Defaults) {
  auto cfg =
      loadOk(credential("    source: {env: KEY}\n"
                        "    hosts: [a.example]\n"
                        "    inject: {header: X-Api-Key}\n"));
  const Credential& c = cfg.credentials.at("c");
  EXPECT_EQ(c.source.kind, CredentialSource::Kind::kEnv);
  EXPECT_EQ(c.source.env, "KEY");
  EXPECT_EQ(c.inject.value, "{secret}");
  EXPECT_FALSE(c.placeholder.has_value());
  EXPECT_FALSE(c.optional);
  EXPECT_FALSE(c.allowPlaintext);
  EXPECT_TRUE(c.scrub);  // on by default
  EXPECT_FALSE(c.upstreamCa.has_value());
}

TEST(CredentialReader, ExecSourceWithTtl) {
  auto cfg =
      loadOk(credential("    source:\n"
                        "      exec: [/usr/bin/get-token, --scope, \"repo read\"]\n"
                        "      ttl: 5m\n"
                        "    hosts: [api.github.com]\n"
                        "    inject: {basic: {username: x-access-token}}\n"));
  const Credential& c = cfg.credentials.at("c");
  EXPECT_EQ(c.source.kind, CredentialSource::Kind::kExec);
  EXPECT_EQ(c.source.exec,
            (std::vector<std::string>{"/usr/bin/get-token", "--scope", "repo read"}));
  EXPECT_EQ(c.source.ttl, Seconds(300));
  EXPECT_EQ(c.inject.kind, Injection::Kind::kBasic);
  EXPECT_EQ(c.inject.username, "x-access-token");
}

TEST(CredentialReader, ExecTtlDefaultAndQueryInjection) {
  auto cfg =
      loadOk(credential("    source: {exec: [tok]}\n"
                        "    hosts: [maps.example]\n"
                        "    inject: {query: key}\n"));
  const Credential& c = cfg.credentials.at("c");
  EXPECT_EQ(c.source.ttl, Seconds(600));
  EXPECT_EQ(c.inject.kind, Injection::Kind::kQuery);
  EXPECT_EQ(c.inject.query, "key");
}

TEST(CredentialReader, Errors) {
  const std::string ok_source = "    source: {env: K}\n";
  const std::string ok_hosts = "    hosts: [a.example]\n";
  const std::string ok_inject = "    inject: {header: X-Key}\n";
  struct Case {
    const char* name;
    std::string body;
    Expected want;
  };
  const Case cases[] = {
      {"no source", ok_hosts + ok_inject, {2, 3, "credentials.c", "missing required key `source`"}},
      {"no inject", ok_source + ok_hosts, {2, 3, "credentials.c", "missing required key `inject`"}},
      {"hosts empty",
       ok_source + "    hosts: []\n" + ok_inject,
       {4, 12, "credentials.c.hosts", "empty list"}},
      {"hosts scalar",
       ok_source + "    hosts: a.example\n" + ok_inject,
       {4, 12, "credentials.c.hosts", "expected a list of strings, e.g. [api.example.com]"}},
      {"env bad name",
       "    source: {env: 1KEY}\n" + ok_hosts + ok_inject,
       {3, 19, "credentials.c.source.env", "expected an environment variable name"}},
      {"exec scalar",
       "    source: {exec: /bin/tok}\n" + ok_hosts + ok_inject,
       {3, 20, "credentials.c.source.exec", "expected a list of strings"}},
      {"exec empty",
       "    source: {exec: []}\n" + ok_hosts + ok_inject,
       {3, 20, "credentials.c.source.exec", "empty list"}},
      {"source unknown key",
       "    source: {file: /k, fiel: /k}\n" + ok_hosts + ok_inject,
       {3, 24, "credentials.c.source.fiel", "unknown key `fiel`; did you mean `file`?"}},
      {"source string",
       "    source: /run/k\n" + ok_hosts + ok_inject,
       {3, 13, "credentials.c.source", "expected a map with one of file, env, exec or github_app"}},
      {"exec ttl bad",
       "    source: {exec: [t], ttl: forever}\n" + ok_hosts + ok_inject,
       {3, 30, "credentials.c.source.ttl", "expected a duration"}},
      {"inject two kinds",
       ok_source + ok_hosts + "    inject: {header: X, query: k}\n",
       {5, 25, "credentials.c.inject.query", "`query` conflicts with `header`"}},
      {"inject none",
       ok_source + ok_hosts + "    inject: {value: \"{secret}\"}\n",
       {5, 5, "credentials.c.inject",
        "expected exactly one of `header`, `bearer`, `basic`, `query` or `per_host`, got none"}},
      {"value with query",
       ok_source + ok_hosts + "    inject: {query: k, value: \"{secret}\"}\n",
       {5, 24, "credentials.c.inject.value", "`value` applies only to `header` injection"}},
      {"basic without username",
       ok_source + ok_hosts + "    inject: {basic: {}}\n",
       {5, 14, "credentials.c.inject.basic", "missing required key `username`"}},
      {"basic is a string",
       ok_source + ok_hosts + "    inject: {basic: user}\n",
       {5, 21, "credentials.c.inject.basic", "expected a map with username, got `user`"}},
      {"placeholder bad",
       ok_source + ok_hosts + ok_inject + "    placeholder: my-key\n",
       {6, 18, "credentials.c.placeholder", "expected an environment variable name"}},
      {"optional yes",
       ok_source + ok_hosts + ok_inject + "    optional: yes\n",
       {6, 15, "credentials.c.optional", "expected true or false, got `yes`"}},
      {"unknown key",
       ok_source + ok_hosts + ok_inject + "    host: [a]\n",
       {6, 5, "credentials.c.host", "unknown key `host`; did you mean `hosts`?"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expectOne(loadErrors(credential(c.body)), c.want);
  }
}

TEST(CredentialReader, PlaceholderUsedTwice) {
  auto errors = loadErrors(
      "credentials:\n"
      "  a: {source: {env: A}, hosts: [a.example], inject: {header: X}, placeholder: KEY}\n"
      "  b: {source: {env: B}, hosts: [b.example], inject: {header: X}, placeholder: KEY}\n");
  expectOne(errors, {3, 79, "credentials.b.placeholder",
                     "placeholder `KEY` is already used by another credential (line 2)"});
}

TEST(CredentialReader, CredentialsSectionErrors) {
  expectOne(loadErrors("credentials: [a]\n"),
            {1, 14, "credentials", "expected a map of credential names to credentials"});
  expectOne(loadErrors("credentials:\n  c: key\n"),
            {2, 6, "credentials.c", "expected a credential (a map with source, hosts, inject, llm or ssh)"});
}

}  // namespace
}  // namespace sandgate::config
