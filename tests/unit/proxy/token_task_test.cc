// Tests for proxy/session/token_task.cc: what a verified task token's claims bind a connection to.
// An ad-hoc task (a `sub` the config does not name, with a `pol` it does) gets exactly its policy:
// its hosts, its credentials, nothing of another policy; a `sub` naming a configured task is that
// task, and its token may only narrow it.
#include "proxy/session/token_task.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "broker/task_secrets.h"
#include "policy/host.h"
#include "tests/unit/broker/test_util.h"

namespace sandgate::proxy {
namespace {

using broker::testing::TempDir;
using broker::testing::writeFile;

constexpr int64_t kNow = 1'800'000'000;

class TokenTaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    writeFile(dir.file("hs.key"), "0123456789abcdef0123456789abcdef-shared-key\n");
    writeFile(dir.file("api.secret"), "sk-api-0123456789\n");
    auto cfg = config::loadString(fmt::format(R"(credentials:
  apikey:
    source: {{ file: {0}/api.secret }}
    hosts: [api.test]
    inject: {{ header: Authorization, value: "Bearer {{secret}}" }}
policies:
  api:
    allow:
      - {{ host: api.test, credential: apikey }}
      - {{ host: docs.test, ports: [80] }}
  other:
    allow:
      - {{ host: other.test }}
tasks:
  - {{ name: t1, policy: api }}
tokens:
  keys: [ {{ id: k1, file: {0}/hs.key }} ]
)",
                                              dir.path()),
                                  "tokens.yaml");
    ASSERT_TRUE(cfg.ok()) << cfg.errorText();
    auto snap = buildSnapshot(std::move(cfg.value()), registry, 1);
    ASSERT_TRUE(snap.ok()) << snap.errorText();
    snap_ = snap.value();
  }

  static TokenClaims claims(std::string sub, std::optional<std::string> pol = std::nullopt) {
    TokenClaims c;
    c.kid = "k1";
    c.alg = "HS256";
    c.task = std::move(sub);
    c.policy = std::move(pol);
    c.exp = kNow + 600;
    return c;
  }

  TokenTask bind(const TokenClaims& c) {
    return taskForToken(*snap_, c, c.task, policy::parseIp("127.0.0.1"), kNow);
  }

  bool allows(const TaskEntry& task, std::string_view host, uint16_t port = 443) {
    auto t = policy::normalizeHost(host);
    return snap_->decide(task, policy::Request{std::get<policy::Target>(t), port, {}, {}, {}})
        .allowed();
  }

  TempDir dir;
  TaskRegistry registry;
  std::shared_ptr<const Snapshot> snap_;
};

TEST_F(TokenTaskTest, AnAdHocTaskGetsExactlyItsPolicy) {
  TokenTask api = bind(claims("sandbox-17", "api"));
  ASSERT_TRUE(api.ok()) << api.reason << ": " << api.detail;
  ASSERT_NE(api.own, nullptr);
  EXPECT_EQ(api.task, api.own.get());
  EXPECT_EQ(api.task->name, "sandbox-17");  // the audit lines' task
  EXPECT_EQ(api.task->adhocPolicy, "api");
  EXPECT_EQ(api.task->seriesName(), "adhoc:api");  // the metric label: bounded by the config
  EXPECT_TRUE(allows(*api.task, "api.test"));
  EXPECT_TRUE(allows(*api.task, "docs.test", 80));
  EXPECT_FALSE(allows(*api.task, "other.test"));  // another policy's host
  // Its policy's credentials, and so their secrets to scrub, and no other.
  EXPECT_EQ(api.task->credentials, std::vector<std::string>{"apikey"});
  ASSERT_NE(api.task->secrets, nullptr);
  EXPECT_FALSE(api.task->secrets->empty());
  EXPECT_EQ(api.task->limits.maxConnections, snap_->defaults.maxConnections);

  TokenTask other = bind(claims("sandbox-18", "other"));
  ASSERT_TRUE(other.ok()) << other.detail;
  EXPECT_TRUE(allows(*other.task, "other.test"));
  EXPECT_FALSE(allows(*other.task, "api.test"));
  EXPECT_TRUE(other.task->credentials.empty());
  // Nothing was added to the configured tasks.
  EXPECT_EQ(snap_->findTask("sandbox-17"), nullptr);
  EXPECT_EQ(snap_->tasks.size(), 1u);
}

TEST_F(TokenTaskTest, AnAdHocTaskCountsItsOwnConnections) {
  TokenTask a = bind(claims("sandbox-1", "api"));
  TokenTask again = bind(claims("sandbox-1", "api"));
  TokenTask b = bind(claims("sandbox-2", "api"));
  ASSERT_TRUE(a.ok() && again.ok() && b.ok());
  EXPECT_EQ(a.task->state, again.task->state);  // one task's connections count together
  EXPECT_NE(a.task->state, b.task->state);      // another ad-hoc task of the policy does not
  EXPECT_NE(a.task->state, snap_->findTask("t1")->state);
  // The states are the registry's, so a reload keeps the counts.
  EXPECT_EQ(snap_->adhocStates, registry.adhoc());
}

TEST_F(TokenTaskTest, ASubNamingAConfiguredTaskIsThatTask) {
  TokenTask t1 = bind(claims("t1"));
  ASSERT_TRUE(t1.ok()) << t1.detail;
  EXPECT_EQ(t1.task, snap_->findTask("t1"));
  EXPECT_EQ(t1.own, nullptr);
  EXPECT_EQ(t1.task->seriesName(), "t1");
  TokenTask same = bind(claims("t1", "api"));  // its own policy, named: fine
  ASSERT_TRUE(same.ok()) << same.detail;
  EXPECT_EQ(same.task, snap_->findTask("t1"));
  // A configured task's name with another policy is not an ad-hoc task: it would widen t1.
  EXPECT_EQ(bind(claims("t1", "other")).reason, token_reason::kWidens);
  EXPECT_EQ(bind(claims("t1", "nosuch")).reason, token_reason::kUnknownPolicy);
}

TEST_F(TokenTaskTest, RefusalsOfAdHocTokens) {
  struct Case {
    const char* name;
    TokenClaims claims;
    std::string_view reason;
  };
  TokenClaims widened = claims("sandbox-3", "other");
  widened.hosts = std::vector<std::string>{"api.test"};  // a host of another policy
  TokenClaims elsewhere = claims("sandbox-4", "api");
  elsewhere.src = "10.1.2.3";
  std::vector<Case> cases = {
      {"no_policy", claims("sandbox-5"), token_reason::kUnknownTask},
      {"unknown_policy", claims("sandbox-6", "nosuch"), token_reason::kUnknownPolicy},
      {"hosts_beyond_the_policy", widened, token_reason::kWidens},
      {"source", elsewhere, token_reason::kSourceMismatch},
  };
  for (const auto& c : cases) EXPECT_EQ(bind(c.claims).reason, c.reason) << c.name;
  TokenClaims c = claims("sandbox-7", "api");
  EXPECT_EQ(taskForToken(*snap_, c, "t1", std::nullopt, kNow).reason, token_reason::kTaskMismatch);
  // Narrowing hosts within the policy is fine, normalised.
  c.hosts = std::vector<std::string>{"API.test."};
  TokenTask narrowed = bind(c);
  ASSERT_TRUE(narrowed.ok()) << narrowed.detail;
  EXPECT_EQ(narrowed.hosts, std::vector<std::string>{"api.test"});
}

// A token's limits may lower the task's, never raise them; the counts stay the task's.
TEST_F(TokenTaskTest, LimitsMayOnlyLower) {
  const TaskEntry& t1 = *snap_->findTask("t1");
  TokenClaims c = claims("t1");
  c.limits = TokenLimits{2, std::nullopt, 5.0};
  TokenTask lowered = bind(c);
  ASSERT_TRUE(lowered.ok()) << lowered.detail;
  ASSERT_NE(lowered.own, nullptr);
  EXPECT_EQ(lowered.task->limits.maxConnections, 2u);
  EXPECT_EQ(lowered.task->limits.maxTunnels, t1.limits.maxTunnels);
  EXPECT_EQ(lowered.task->limits.newConnectionsPerSecond, 5.0);
  EXPECT_EQ(lowered.task->name, "t1");
  EXPECT_EQ(lowered.task->state, t1.state);
  EXPECT_EQ(lowered.task->adhocPolicy, std::nullopt);
  EXPECT_EQ(t1.limits.maxConnections, snap_->defaults.maxConnections);  // t1 itself unchanged

  c.limits = TokenLimits{t1.limits.maxConnections, std::nullopt, std::nullopt};  // equal: fine
  EXPECT_TRUE(bind(c).ok());
  c.limits = TokenLimits{t1.limits.maxConnections + 1, std::nullopt, std::nullopt};
  TokenTask widened = bind(c);
  EXPECT_EQ(widened.reason, token_reason::kWidens);
  EXPECT_NE(widened.detail.find("limits.max_connections"), std::string::npos) << widened.detail;
  c.limits = TokenLimits{std::nullopt, std::nullopt, t1.limits.newConnectionsPerSecond * 2};
  EXPECT_EQ(bind(c).reason, token_reason::kWidens);

  // An ad-hoc task's limits (the global ones) lower the same way.
  TokenClaims adhoc = claims("sandbox-9", "api");
  adhoc.limits = TokenLimits{std::nullopt, 1, std::nullopt};
  TokenTask a = bind(adhoc);
  ASSERT_TRUE(a.ok()) << a.detail;
  EXPECT_EQ(a.task->limits.maxTunnels, 1u);
  EXPECT_EQ(a.task->adhocPolicy, "api");
  EXPECT_EQ(a.task->name, "sandbox-9");
}

}  // namespace
}  // namespace sandgate::proxy
