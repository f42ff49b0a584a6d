// Tests of the config model's own behaviour: limit inheritance, task lookup, secret paths.
#include "config/config.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace sandgate::config {
namespace {

TEST(ResolveLimits, DefaultsWhenNothingIsSet) {
  EffectiveLimits e = resolveLimits(Limits{}, Limits{});
  EffectiveLimits d;
  EXPECT_EQ(e.maxConnections, d.maxConnections);
  EXPECT_EQ(e.maxTunnels, d.maxTunnels);
  EXPECT_EQ(e.newConnectionsPerSecond, d.newConnectionsPerSecond);
  EXPECT_EQ(e.maxHeaderBytes, 64u * 1024);
  EXPECT_EQ(e.headerTimeout, Seconds(10));
  EXPECT_EQ(e.idleTimeout, Seconds(300));
  EXPECT_EQ(e.shutdownGrace, Seconds(10));
  EXPECT_EQ(e.revokeGrace, Seconds(2));
  // The HTTP/2 bounds that were constants before they were keys keep their values.
  EXPECT_EQ(e.h2MaxConcurrentStreams, 100u);
  EXPECT_EQ(e.h2ResetBurst, 1000u);
  EXPECT_EQ(e.h2ResetsPerSecond, 33u);
  EXPECT_EQ(e.h2MaxContinuations, 8u);
  EXPECT_EQ(e.h2MaxSettings, 32u);
  EXPECT_EQ(e.h2MaxOutboundAck, 1000u);
}

TEST(ResolveLimits, TaskBeatsGlobalBeatsDefault) {
  Limits global;
  global.maxConnections = 10;
  global.maxTunnels = 20;
  global.idleTimeout = Seconds(60);
  global.maxHeaderBytes = 1024;
  Limits task;
  task.maxConnections = 3;        // overrides global
  task.bodyTimeout = Seconds(1);  // only in task
  task.newConnectionsPerSecond = 0.5;
  global.h2MaxConcurrentStreams = 50;
  task.h2MaxConcurrentStreams = 4;
  global.h2ResetBurst = 10;
  EffectiveLimits e = resolveLimits(global, task);
  EXPECT_EQ(e.h2MaxConcurrentStreams, 4u);                        // task
  EXPECT_EQ(e.h2ResetBurst, 10u);                                 // global
  EXPECT_EQ(e.h2ResetsPerSecond, 33u);                            // default
  EXPECT_EQ(e.maxConnections, 3u);                                // task
  EXPECT_EQ(e.maxTunnels, 20u);                                   // global
  EXPECT_EQ(e.idleTimeout, Seconds(60));                          // global
  EXPECT_EQ(e.maxHeaderBytes, 1024u);                             // global
  EXPECT_EQ(e.bodyTimeout, Seconds(1));                           // task
  EXPECT_EQ(e.newConnectionsPerSecond, 0.5);                      // task
  EXPECT_EQ(e.connectTimeout, EffectiveLimits{}.connectTimeout);  // default
  EXPECT_EQ(e.headerTimeout, EffectiveLimits{}.headerTimeout);    // default
}

TEST(ResolveLimits, EveryFieldIsInherited) {
  // Each field set only globally must come through; a field forgotten in resolveLimits would
  // silently fall back to its default.
  Limits g;
  g.maxConnections = 1;
  g.maxTunnels = 2;
  g.newConnectionsPerSecond = 3;
  g.maxHeaderBytes = 4;
  g.headerTimeout = Seconds(5);
  g.bodyTimeout = Seconds(6);
  g.idleTimeout = Seconds(7);
  g.connectTimeout = Seconds(8);
  g.shutdownGrace = Seconds(9);
  g.revokeGrace = Seconds(11);
  g.h2MaxConcurrentStreams = 12;
  g.h2ResetBurst = 13;
  g.h2ResetsPerSecond = 14;
  g.h2MaxContinuations = 15;
  g.h2MaxSettings = 16;
  g.h2MaxOutboundAck = 17;
  for (bool viaTask : {false, true}) {
    SCOPED_TRACE(viaTask ? "set on the task" : "set globally");
    EffectiveLimits e = viaTask ? resolveLimits(Limits{}, g) : resolveLimits(g, Limits{});
    EXPECT_EQ(e.maxConnections, 1u);
    EXPECT_EQ(e.maxTunnels, 2u);
    EXPECT_EQ(e.newConnectionsPerSecond, 3);
    EXPECT_EQ(e.maxHeaderBytes, 4u);
    EXPECT_EQ(e.headerTimeout, Seconds(5));
    EXPECT_EQ(e.bodyTimeout, Seconds(6));
    EXPECT_EQ(e.idleTimeout, Seconds(7));
    EXPECT_EQ(e.connectTimeout, Seconds(8));
    EXPECT_EQ(e.shutdownGrace, Seconds(9));
    EXPECT_EQ(e.revokeGrace, Seconds(11));
    EXPECT_EQ(e.h2MaxConcurrentStreams, 12u);
    EXPECT_EQ(e.h2ResetBurst, 13u);
    EXPECT_EQ(e.h2ResetsPerSecond, 14u);
    EXPECT_EQ(e.h2MaxContinuations, 15u);
    EXPECT_EQ(e.h2MaxSettings, 16u);
    EXPECT_EQ(e.h2MaxOutboundAck, 17u);
  }
}

TEST(ResolveLimits, FromLoadedConfig) {
  auto r = loadString(
      "policies: {p: {}}\n"
      "limits: {max_connections: 100, idle_timeout: 1m}\n"
      "tasks:\n"
      "  - name: t\n"
      "    policy: p\n"
      "    limits: {max_connections: 5, header_timeout: 250ms}\n",
      "t.yaml");
  ASSERT_TRUE(r.ok()) << r.errorText();
  EffectiveLimits e = resolveLimits(r->limits, r->findTask("t")->limits);
  EXPECT_EQ(e.maxConnections, 5u);
  EXPECT_EQ(e.idleTimeout, Seconds(60));
  EXPECT_EQ(e.headerTimeout, Seconds(0.25));
  EXPECT_EQ(e.bodyTimeout, Seconds(10));
}

TEST(FindTask, ByExactName) {
  Config c;
  for (const char* name : {"a", "b"}) {
    Task t;
    t.name = name;
    c.tasks.push_back(t);
  }
  ASSERT_NE(c.findTask("b"), nullptr);
  EXPECT_EQ(c.findTask("b")->name, "b");
  EXPECT_EQ(c.findTask("B"), nullptr);
  EXPECT_EQ(c.findTask(""), nullptr);
  EXPECT_EQ(c.findTask("c"), nullptr);
}

TEST(SecretPaths, AnExecSourcesInputFilesAreSecretItsProgramsAreNot) {
  // A token helper's key or refresh token is as secret as a file: source (issue 37, item 9).
  Config c;
  Credential cred;
  cred.source.kind = CredentialSource::Kind::kExec;
  cred.source.exec = {"/opt/helper/get-token",
                      "--key-file=/srv/keys/k.pem",
                      "/srv/refresh.txt",
                      "/usr/bin/python3",
                      "-v",
                      "relative.txt",
                      "--lib=/lib/x.so"};
  c.credentials["h"] = cred;
  auto hidden = c.secretPaths();
  auto has = [&](const std::string& p) {
    return std::find(hidden.begin(), hidden.end(), p) != hidden.end();
  };
  EXPECT_TRUE(has("/srv/keys/k.pem"));
  EXPECT_TRUE(has("/srv/refresh.txt"));
  EXPECT_FALSE(has("/opt/helper/get-token"));  // the program: argv[0]
  EXPECT_FALSE(has("/usr/bin/python3"));       // a system program given as an argument
  EXPECT_FALSE(has("/lib/x.so"));
  EXPECT_FALSE(has("relative.txt"));
}

}  // namespace
}  // namespace sandgate::config
