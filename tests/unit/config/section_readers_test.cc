// Tests of the smaller sections: listen, tasks, limits, resolve, audit, metrics, ca, tls.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::Expected;
using testing::expectOne;
using testing::loadErrors;
using testing::loadOk;

const std::string kHash = "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef";

TEST(SectionReaders, ListenAuditMetricsCaTls) {
  auto c = loadOk(
      "listen:\n"
      "  proxy: \"[::1]:3128\"\n"
      "  metrics: 127.0.0.1:9464\n"
      "  admin: /run/sandgate/admin.sock\n"
      "audit: {path: /var/log/audit.jsonl}\n"
      "metrics: {task_series_ttl: 1h}\n"
      "ca: {cert: /ca.pem, key: /ca.key}\n"
      "ca_cert_out: /out/ca.pem\n"
      "tls: {upstream_ca: /extra.pem, leaf_cache_size: 64}\n"
      "transparent: {ports: [8443, 993]}\n");
  ASSERT_TRUE(c.listen.proxy.has_value());
  EXPECT_EQ(c.listen.proxy->value, "[::1]:3128");
  EXPECT_EQ(c.listen.proxy->mark.line, 2);
  EXPECT_EQ(c.listen.metrics->value, "127.0.0.1:9464");
  EXPECT_EQ(c.listen.admin->value, "/run/sandgate/admin.sock");
  EXPECT_FALSE(c.listen.adminGroup.has_value());
  auto g = loadOk("listen: {admin: /run/sandgate/team/a.sock, admin_group: sandgate}\n");
  ASSERT_TRUE(g.listen.adminGroup.has_value());
  EXPECT_EQ(g.listen.adminGroup->value, "sandgate");
  EXPECT_EQ(g.listen.adminGroup->mark.line, 1);
  EXPECT_EQ(c.audit.path, "/var/log/audit.jsonl");
  EXPECT_EQ(c.metrics.taskSeriesTtl, Seconds(3600));
  ASSERT_TRUE(c.ca.has_value());
  EXPECT_EQ(c.ca->cert, "/ca.pem");
  EXPECT_EQ(c.ca->key, "/ca.key");
  EXPECT_EQ(c.caCertOut, "/out/ca.pem");
  EXPECT_EQ(c.tls.upstreamCa, "/extra.pem");
  EXPECT_EQ(c.tls.leafCacheSize, 64u);
  EXPECT_EQ(c.transparent.ports, (std::vector<uint16_t>{8443, 993}));
}

TEST(SectionReaders, TaskAdminGroups) {
  auto c = loadOk(
      "listen: {admin: /run/sandgate/admin.sock, admin_group: sandgate}\n"
      "policies: {p: {}}\n"
      "tasks:\n"
      "  - {name: a, policy: p, admin_groups: [team-a, 1001]}\n"
      "  - {name: b, policy: p}\n");
  ASSERT_EQ(c.tasks.size(), 2u);
  ASSERT_TRUE(c.tasks[0].adminGroups.has_value());
  ASSERT_EQ(c.tasks[0].adminGroups->size(), 2u);
  EXPECT_EQ((*c.tasks[0].adminGroups)[0].value, "team-a");
  EXPECT_EQ((*c.tasks[0].adminGroups)[1].value, "1001");
  EXPECT_EQ((*c.tasks[0].adminGroups)[1].mark.line, 4);
  EXPECT_FALSE(c.tasks[1].adminGroups.has_value());
}

TEST(SectionReaders, DefaultsWhenSectionsAreAbsent) {
  auto c = loadOk("policies: {}\n");
  EXPECT_FALSE(c.listen.proxy.has_value());
  EXPECT_FALSE(c.audit.path.has_value());
  EXPECT_EQ(c.metrics.taskSeriesTtl, Seconds(600));
  EXPECT_FALSE(c.ca.has_value());
  EXPECT_FALSE(c.caCertOut.has_value());
  EXPECT_FALSE(c.tls.upstreamCa.has_value());
  EXPECT_EQ(c.tls.leafCacheSize, 1024u);
  EXPECT_FALSE(c.limits.maxConnections.has_value());
  EXPECT_TRUE(c.transparent.ports.empty());
}

TEST(SectionReaders, EmptySectionsMeanNone) {
  auto c = loadOk("credentials:\npolicies:\ntasks:\nresolve:\nglobal:\nlimits:\nlisten:\n");
  EXPECT_TRUE(c.credentials.empty());
  EXPECT_TRUE(c.tasks.empty());
}

TEST(SectionReaders, Tasks) {
  auto c = loadOk(
      "policies: {p: {}}\n"
      "tasks:\n"
      "  - name: a.b_c-1\n"
      "    policy: p\n"
      "    token_sha256: " +
      kHash +
      "\n"
      "  - name: other\n"
      "    policy: p\n");
  ASSERT_EQ(c.tasks.size(), 2u);
  const Task& t = c.tasks[0];
  EXPECT_EQ(t.name, "a.b_c-1");
  EXPECT_EQ(t.mark.line, 3);
  EXPECT_EQ(t.policy.value, "p");
  EXPECT_EQ(t.policy.mark.line, 4);
  EXPECT_EQ(t.policy.mark.col, 13);
  // Stored lower-case so that comparing with a computed digest is a plain string compare.
  EXPECT_EQ(t.tokenSha256, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  EXPECT_FALSE(c.tasks[1].tokenSha256.has_value());
}

TEST(SectionReaders, EveryLimit) {
  auto c = loadOk(
      "limits:\n"
      "  max_connections: 10\n"
      "  max_tunnels: 20\n"
      "  new_connections_per_second: 2.5\n"
      "  max_header_bytes: 32KiB\n"
      "  header_timeout: 1s\n"
      "  body_timeout: 2s\n"
      "  idle_timeout: 3m\n"
      "  connect_timeout: 500ms\n"
      "  shutdown_grace: 0\n"
      "  revoke_grace: 0\n"
      "  h2_max_concurrent_streams: 4\n"
      "  h2_reset_burst: 50\n"
      "  h2_resets_per_second: 5\n"
      "  h2_max_continuations: 0\n"
      "  h2_max_settings: 10\n"
      "  h2_max_outbound_ack: 100\n");
  const Limits& l = c.limits;
  EXPECT_EQ(l.h2MaxConcurrentStreams, 4u);
  EXPECT_EQ(l.h2ResetBurst, 50u);
  EXPECT_EQ(l.h2ResetsPerSecond, 5u);
  EXPECT_EQ(l.h2MaxContinuations, 0u);
  EXPECT_EQ(l.h2MaxSettings, 10u);
  EXPECT_EQ(l.h2MaxOutboundAck, 100u);
  EXPECT_EQ(l.maxConnections, 10u);
  EXPECT_EQ(l.maxTunnels, 20u);
  EXPECT_EQ(l.newConnectionsPerSecond, 2.5);
  EXPECT_EQ(l.maxHeaderBytes, 32u * 1024);
  EXPECT_EQ(l.headerTimeout, Seconds(1));
  EXPECT_EQ(l.bodyTimeout, Seconds(2));
  EXPECT_EQ(l.idleTimeout, Seconds(180));
  EXPECT_EQ(l.connectTimeout, Seconds(0.5));
  EXPECT_EQ(l.shutdownGrace, Seconds(0));
  EXPECT_EQ(l.revokeGrace, Seconds(0));
}

TEST(SectionReaders, ResolveForms) {
  struct Case {
    const char* name;
    const char* key;
    const char* value;
    const char* wantName;
    const char* wantAddress;
    std::optional<uint16_t> wantPort;
  };
  const Case cases[] = {
      {"ipv4", "a.example", "127.0.0.1", "a.example", "127.0.0.1", std::nullopt},
      {"ipv4 with port", "a.example", "127.0.0.1:8443", "a.example", "127.0.0.1", 8443},
      {"bare ipv6", "a.example", "\"::1\"", "a.example", "::1", std::nullopt},
      {"bracketed ipv6", "a.example", "\"[::1]\"", "a.example", "::1", std::nullopt},
      {"bracketed ipv6 with port", "a.example", "\"[::1]:9000\"", "a.example", "::1", 9000},
      {"upper case and trailing dot", "API.Example.COM.", "10.1.2.3", "api.example.com", "10.1.2.3",
       std::nullopt},
      {"mapped ipv6", "a.example", "\"::ffff:127.0.0.1\"", "a.example", "::ffff:127.0.0.1",
       std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto cfg = loadOk(std::string("resolve:\n  ") + c.key + ": " + c.value + "\n");
    ASSERT_EQ(cfg.resolve.size(), 1u);
    EXPECT_EQ(cfg.resolve[0].name, c.wantName);
    EXPECT_EQ(cfg.resolve[0].address, c.wantAddress);
    EXPECT_EQ(cfg.resolve[0].port, c.wantPort);
    EXPECT_EQ(cfg.resolve[0].mark.line, 2);
    EXPECT_EQ(cfg.resolve[0].mark.col, 3);
  }
}

TEST(SectionReaders, ResolveErrors) {
  const char* kExpected = "expected an IP address, optionally with a port";
  struct Case {
    const char* name;
    const char* entry;
    Expected want;
  };
  const Case cases[] = {
      {"host name value", "a.example: localhost", {2, 14, "resolve[\"a.example\"]", kExpected}},
      {"ipv6 unbracketed with port",
       "a.example: \"::1:80\"",
       {0, 0, "", ""}},  // "::1:80" is itself a valid IPv6 address
      {"ipv6 port zero", "a.example: \"[::1]:0\"", {2, 14, "resolve[\"a.example\"]", kExpected}},
      {"ipv4 in brackets",
       "a.example: \"[127.0.0.1]:80\"",
       {2, 14, "resolve[\"a.example\"]", kExpected}},
      {"port too big", "a.example: 127.0.0.1:70000", {2, 14, "resolve[\"a.example\"]", kExpected}},
      {"empty address", "a.example:", {2, 3, "resolve[\"a.example\"]", "empty value"}},
      {"list", "a.example: [127.0.0.1]", {2, 14, "resolve[\"a.example\"]", "got a list"}},
      {"bad host name",
       "\"a b\": 127.0.0.1",
       {2, 3, "resolve[\"a b\"]", "expected a host name (letters, digits, '-', '.'), got `a b`"}},
      {"only a dot", "\".\": 127.0.0.1", {2, 3, "resolve[\".\"]", "expected a host name"}},
      {"wildcard",
       "\"*.a.example\": 127.0.0.1",
       {2, 3, "resolve[\"*.a.example\"]", "expected a host name"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string yaml = std::string("resolve:\n  ") + c.entry + "\n";
    if (c.want.line == 0) {
      loadOk(yaml);
      continue;
    }
    expectOne(loadErrors(yaml), c.want);
  }
}

TEST(SectionReaders, Errors) {
  struct Case {
    const char* name;
    std::string yaml;
    Expected want;
  };
  const Case cases[] = {
      {"listen unknown key",
       "listen:\n  prxy: 127.0.0.1:1\n",
       {2, 3, "listen.prxy", "did you mean `proxy`?"}},
      {"listen metrics bare ipv6",
       "listen:\n  metrics: \"::1:9464\"\n",
       {2, 12, "listen.metrics", "expected host:port such as 127.0.0.1:9464"}},
      {"tasks is a map",
       "tasks:\n  name: a\n",
       {2, 3, "tasks", "expected a list of tasks, got a map"}},
      {"task without name",
       "policies: {p: {}}\ntasks:\n  - policy: p\n",
       {3, 5, "tasks[0]", "missing required key `name`"}},
      {"task without policy",
       "tasks:\n  - name: a\n",
       {2, 5, "tasks[0]", "missing required key `policy`"}},
      {"task token too long",
       "policies: {p: {}}\ntasks:\n  - {name: a, policy: p, token_sha256: " + kHash + "0}\n",
       {3, 40, "tasks[0].token_sha256", "got 65 characters (value not shown)"}},
      {"task token not hex",
       "policies: {p: {}}\ntasks:\n  - {name: a, policy: p, token_sha256: " + std::string(64, 'g') +
           "}\n",
       {3, 40, "tasks[0].token_sha256", "got 64 characters (value not shown)"}},
      {"task limits typo",
       "policies: {p: {}}\ntasks:\n  - name: a\n    policy: p\n    limits:\n"
       "      max_conections: 5\n",
       {6, 7, "tasks[0].limits.max_conections", "did you mean `max_connections`?"}},
      {"h2 streams zero",
       "limits: {h2_max_concurrent_streams: 0}\n",
       {1, 37, "limits.h2_max_concurrent_streams",
        "expected an integer from 1 to 2147483647, got `0`"}},
      {"h2 reset rate zero",
       "limits:\n  h2_resets_per_second: 0\n",
       {2, 25, "limits.h2_resets_per_second", "expected an integer from 1 to 4294967295, got `0`"}},
      {"h2 key typo",
       "limits:\n  h2_max_continuation: 2\n",
       {2, 3, "limits.h2_max_continuation", "did you mean `h2_max_continuations`?"}},
      {"max_tunnels zero",
       "limits: {max_tunnels: 0}\n",
       {1, 23, "limits.max_tunnels", "expected an integer from 1 to 4294967295, got `0`"}},
      {"rate zero",
       "limits: {new_connections_per_second: 0}\n",
       {1, 38, "limits.new_connections_per_second", "expected a number greater than 0"}},
      {"timeout zero",
       "limits: {header_timeout: 0s}\n",
       {1, 26, "limits.header_timeout", "expected a duration greater than 0, got `0s`"}},
      {"metrics ttl",
       "metrics: {task_series_ttl: never}\n",
       {1, 28, "metrics.task_series_ttl", "expected a duration"}},
      {"ca without key",
       "ca: {cert: /c.pem}\n",
       {1, 1, "ca", "missing required key `key` (a PEM file path)"}},
      {"ca_cert_out is a map",
       "ca_cert_out: {path: x}\n",
       {1, 14, "ca_cert_out", "expected a file path, got a map"}},
      {"audit is a list", "audit: [x]\n", {1, 8, "audit", "expected a map with path, got a list"}},
      {"leaf cache zero",
       "tls: {leaf_cache_size: 0}\n",
       {1, 24, "tls.leaf_cache_size", "expected an integer from 1 to 1000000, got `0`"}},
      // A sandbox has a private /run: only there is an admin socket out of every sandbox's reach.
      {"admin relative",
       "listen: {admin: run/sandgate/admin.sock}\n",
       {1, 17, "listen.admin",
        "the admin socket must be under /run/sandgate/, got `run/sandgate/admin.sock`; use a "
        "path under /run/sandgate/ such as /run/sandgate/admin.sock (every sandbox has a private "
        "/run, so no sandbox can reach a socket there)"}},
      {"admin elsewhere",
       "listen: {admin: /var/tmp/admin.sock}\n",
       {1, 17, "listen.admin", "the admin socket must be under /run/sandgate/, got `/var/tmp/"}},
      {"admin in /run itself",
       "listen: {admin: /run/sandgate.sock}\n",
       {1, 17, "listen.admin", "must be under /run/sandgate/, got `/run/sandgate.sock`"}},
      {"admin is the directory",
       "listen: {admin: /run/sandgate/}\n",
       {1, 17, "listen.admin", "must be under /run/sandgate/, got `/run/sandgate/`"}},
      {"admin escapes with ..",
       "listen: {admin: /run/sandgate/../admin.sock}\n",
       {1, 17, "listen.admin", "without empty, `.` or `..` components"}},
      {"admin doubled slash",
       "listen: {admin: /run/sandgate//admin.sock}\n",
       {1, 17, "listen.admin", "without empty, `.` or `..` components"}},
      {"admin a directory",
       "listen: {admin: /run/sandgate/sub/}\n",
       {1, 17, "listen.admin", "expected a socket path, not a directory"}},
      {"admin too long",
       "listen: {admin: /run/sandgate/" + std::string(95, 'a') + "}\n",
       {1, 17, "listen.admin", "at most 107 bytes, got 109"}},
      {"task admin_groups without listen.admin_group",
       "listen: {admin: /run/sandgate/a.sock}\npolicies: {p: {}}\n"
       "tasks: [{name: t, policy: p, admin_groups: [team]}]\n",
       {3, 45, "tasks[0].admin_groups", "admin_groups needs listen.admin_group"}},
      {"task admin_groups empty",
       "policies: {p: {}}\ntasks: [{name: t, policy: p, admin_groups: []}]\n",
       {2, 44, "tasks[0].admin_groups", "empty list"}},
      {"task admin_groups bad name",
       "listen: {admin: /run/sandgate/a.sock, admin_group: g}\npolicies: {p: {}}\n"
       "tasks: [{name: t, policy: p, admin_groups: [\"a,b\"]}]\n",
       {3, 45, "tasks[0].admin_groups[0]", "expected a group name or numeric gid, got `a,b`"}},
      {"admin_group without admin",
       "listen: {admin_group: sandgate}\n",
       {1, 10, "listen.admin_group", "admin_group needs listen.admin"}},
      {"transparent dns port",
       "transparent: {ports: [53]}\n",
       {1, 23, "transparent.ports[0]", "port 53 cannot be captured"}},
      {"transparent port zero",
       "transparent: {ports: [0]}\n",
       {1, 23, "transparent.ports[0]", "expected an integer from 1 to 65535, got `0`"}},
      {"tls typo",
       "tls: {upstream-ca: /x}\n",
       {1, 7, "tls.upstream-ca", "did you mean `upstream_ca`?"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expectOne(loadErrors(c.yaml), c.want);
  }
}

}  // namespace
}  // namespace sandgate::config
