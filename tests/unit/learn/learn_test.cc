// learn/learn: the draft compiles, passes its own cases, refuses what was never seen; diff
// finds a changed decision and none between identical configs; --merge and --strict.
#include "learn/learn.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/config.h"
#include "config/test_cases.h"
#include "policy/check.h"
#include "policy/engine.h"

namespace sandgate::learn {
namespace {

std::string req(const std::string& kind, const std::string& verdict, const std::string& reason,
                const std::string& host, int port, const std::string& method,
                const std::string& path, const std::string& credential = "null",
                const std::string& upstream = "null") {
  return "{\"kind\":\"" + kind + "\",\"task\":\"demo\",\"method\":" + method +
         ",\"scheme\":\"https\",\"host\":\"" + host + "\",\"port\":" + std::to_string(port) +
         ",\"path\":" + path + ",\"verdict\":\"" + verdict + "\",\"reason\":\"" + reason +
         "\",\"rule\":null,\"credential\":" + credential + ",\"upstream\":" + upstream +
         ",\"git\":null}\n";
}

std::string audit() {
  return req("intercept", "allow", "allowed", "api.test", 443, "\"POST\"", "\"/v1/chat\"",
             "\"openai\"") +
         req("intercept", "allow", "allowed", "api.test", 443, "\"GET\"", "\"/v1/files/a1\"",
             "\"openai\"") +
         req("intercept", "allow", "allowed", "api.test", 443, "\"GET\"", "\"/v1/files/b2\"",
             "\"openai\"") +
         req("intercept", "allow", "allowed", "api.test", 443, "\"GET\"", "\"/v1/files/c3\"",
             "\"openai\"") +
         req("tunnel", "allow", "allowed", "pkg.test", 443, "\"CONNECT\"", "null") +
         req("refusal", "deny", "no_matching_rule", "new.test", 80, "\"GET\"", "\"/x\"") +
         req("forward", "allow", "allowed", "local.test", 80, "\"GET\"", "\"/\"", "null",
             "\"127.0.0.1:4000\"") +
         "garbage line\n";
}

class LearnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("learn-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    auditPath_ = write("audit.jsonl", audit());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    auto p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }

  LearnOutput learn(LearnOptions o) {
    std::stringstream none;
    if (o.audits.empty()) o.audits = {auditPath_};
    o.wantTests = true;
    return learnPolicy(o, none);
  }

  std::filesystem::path dir_;
  std::string auditPath_;
};

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

TEST_F(LearnTest, TheDraftLintsPassesItsCasesAndRefusesWhatWasNeverSeen) {
  auto out = learn({});
  ASSERT_EQ(out.exit, kExitOk) << joined(out.messages);
  // The bad line is reported with its number, and skipped.
  EXPECT_NE(joined(out.messages).find("audit.jsonl:8: skipped"), std::string::npos)
      << joined(out.messages);
  EXPECT_NE(joined(out.messages).find("credential \"openai\" was used but is not defined"),
            std::string::npos);
  EXPECT_NE(out.config.find("\"/v1/files/*\""), std::string::npos) << out.config;
  EXPECT_EQ(out.config.find("**"), std::string::npos) << out.config;

  auto cfgPath = write("learned.yaml", out.config);
  auto cfg = config::loadFile(cfgPath);
  ASSERT_TRUE(cfg) << out.config;
  auto engine = policy::Engine::compile(*cfg);
  ASSERT_TRUE(engine) << out.config;

  auto suite = config::loadTestSuite(write("learned.tests.yaml", out.tests));
  ASSERT_TRUE(suite) << out.tests;
  EXPECT_EQ(suite->cases.size(), 7u) << out.tests;
  for (const auto& tc : suite->cases) {
    auto r = policy::runCase(**engine, *cfg, tc);
    EXPECT_TRUE(r.passed) << tc.name << ": " << r.message;
  }
  auto check = [&](const std::string& target, std::optional<std::string> method) {
    auto t = std::get<policy::CheckTarget>(policy::parseCheckTarget(target));
    return policy::checkTarget(**engine, *cfg, "demo", t, method).decision;
  };
  EXPECT_FALSE(check("never.test:443", std::nullopt).allowed());
  EXPECT_EQ(check("https://api.test/v1/admin", "GET").reason, "path_not_allowed");
  EXPECT_EQ(check("https://api.test/v1/chat", "DELETE").reason, "method_not_allowed");
  EXPECT_TRUE(check("https://api.test/v1/files/zz9", "GET").allowed());
  EXPECT_FALSE(check("https://api.test/v1/files/zz9/x", "GET").allowed());
  EXPECT_TRUE(check("http://new.test/x", "GET").allowed());  // refused, then learned
}

TEST_F(LearnTest, GitTrafficGivesOneGitBlockPerHostAndPushCases) {
  std::string git =
      "{\"repository\":\"acme/w\",\"service\":\"receive-pack\",\"refs\":["
      "{\"ref\":\"refs/heads/agent/x\",\"old\":\"" +
      std::string(40, '0') + "\",\"new\":\"" + std::string(40, '1') +
      "\",\"reason\":\"allowed\"},"
      "{\"ref\":\"refs/tags/v1\",\"old\":\"" +
      std::string(40, '0') + "\",\"new\":\"" + std::string(40, '2') +
      "\",\"reason\":\"allowed\"},"
      "{\"ref\":\"refs/heads/old\",\"old\":\"" +
      std::string(40, '3') + "\",\"new\":\"" + std::string(40, '0') +
      "\",\"reason\":\"allowed\"}]}";
  std::string refs = "{\"repository\":\"acme/w\",\"service\":\"receive-pack-refs\"}";
  auto line = [](const std::string& method, const std::string& path, const std::string& g) {
    return "{\"kind\":\"intercept\",\"task\":\"demo\",\"method\":\"" + method +
           "\",\"scheme\":\"https\",\"host\":\"git.test\",\"port\":443,\"path\":\"" + path +
           "\",\"verdict\":\"allow\",\"reason\":\"allowed\",\"rule\":\"c:1\","
           "\"credential\":\"gh\",\"upstream\":null,\"git\":" +
           g + "}\n";
  };
  auditPath_ = write("git.jsonl", line("GET", "/acme/w.git/info/refs", refs) +
                                      line("POST", "/acme/w.git/git-receive-pack", git));
  auto out = learn({});
  ASSERT_EQ(out.exit, kExitOk) << joined(out.messages) << out.config;
  // Both rules (GET discovery, POST push) carry the same block, with the push's refs.
  const std::string block =
      "        git:\n          repositories: [\"acme/w\"]\n"
      "          push: {refs: [\"refs/heads/agent/x\", \"refs/heads/old\"], delete: true, "
      "tags: true}\n";
  auto first = out.config.find(block);
  ASSERT_NE(first, std::string::npos) << out.config;
  EXPECT_NE(out.config.find(block, first + 1), std::string::npos) << out.config;
  EXPECT_NE(out.tests.find("git_push: \":refs/heads/old\""), std::string::npos) << out.tests;
  auto cfg = config::loadFile(write("git.yaml", out.config));
  ASSERT_TRUE(cfg);
  auto engine = policy::Engine::compile(*cfg);
  ASSERT_TRUE(engine);
  auto suite = config::loadTestSuite(write("git.tests.yaml", out.tests));
  ASSERT_TRUE(suite);
  EXPECT_EQ(suite->cases.size(), 5u);  // two requests, three pushed refs
  for (const auto& tc : suite->cases) {
    auto r = policy::runCase(**engine, *cfg, tc);
    EXPECT_TRUE(r.passed) << tc.name << ": " << r.message;
  }
  // policy diff decides each pushed ref too: narrowing git.push.refs changes one.
  std::string narrowed = out.config;
  for (size_t at; (at = narrowed.find("\"refs/heads/agent/x\", ")) != std::string::npos;) {
    narrowed.erase(at, std::string("\"refs/heads/agent/x\", ").size());
  }
  std::stringstream none;
  auto diff = diffPolicies(
      {write("git-old.yaml", out.config), write("git-new.yaml", narrowed), {auditPath_}, "", false},
      none);
  EXPECT_EQ(diff.exit, kExitChanged) << diff.report << joined(diff.messages);
  EXPECT_NE(diff.report.find("git push refs/heads/agent/x https://git.test:443/acme/w.git"),
            std::string::npos)
      << diff.report;
  EXPECT_NE(diff.report.find("after:  deny (git_ref_not_allowed"), std::string::npos)
      << diff.report;
  // A ref that was not pushed is refused.
  auto repo =
      std::get<policy::CheckTarget>(policy::parseCheckTarget("https://git.test/acme/w.git"));
  EXPECT_EQ(policy::checkGitPush(**engine, *cfg, "demo", repo, "refs/heads/main").decision.reason,
            "git_ref_not_allowed");
}

TEST_F(LearnTest, ExplainCountsTheRequestsOfEachRule) {
  LearnOptions o;
  o.explain = true;
  auto out = learn(o);
  ASSERT_EQ(out.exit, kExitOk) << joined(out.messages);
  EXPECT_NE(out.config.find("# covers 3 requests (" + auditPath_ + ":2, 3, 4)"), std::string::npos)
      << out.config;
}

TEST_F(LearnTest, StrictMakesABadLineFatal) {
  LearnOptions o;
  o.strict = true;
  auto out = learn(o);
  EXPECT_EQ(out.exit, kExitError);
  EXPECT_NE(joined(out.messages).find("audit.jsonl:8: error"), std::string::npos);
  EXPECT_EQ(out.config, "");
}

TEST_F(LearnTest, DiffShowsAChangedDecisionAndNoneBetweenIdenticalConfigs) {
  auto out = learn({});
  ASSERT_EQ(out.exit, kExitOk);
  auto before = write("old.yaml", out.config);
  std::string edited = out.config;
  auto at = edited.find("- host: \"pkg.test\"");
  ASSERT_NE(at, std::string::npos) << edited;
  edited.replace(at, std::string("- host: \"pkg.test\"").size(), "- host: \"pkg2.test\"");
  auto after = write("new.yaml", edited);
  std::stringstream none;
  auto same = diffPolicies({before, before, {auditPath_}, "", false}, none);
  EXPECT_EQ(same.exit, kExitOk) << same.report << joined(same.messages);
  auto changed = diffPolicies({before, after, {auditPath_}, "", false}, none);
  EXPECT_EQ(changed.exit, kExitChanged) << changed.report;
  EXPECT_NE(changed.report.find("pkg.test:443"), std::string::npos) << changed.report;
  EXPECT_NE(changed.report.find("before: allow (allowed; rule " + before), std::string::npos)
      << changed.report;
  EXPECT_NE(changed.report.find("after:  deny (no_matching_rule"), std::string::npos);
  EXPECT_NE(changed.report.find("1 of 7 distinct requests change"), std::string::npos);
  auto broken =
      diffPolicies({before, write("bad.yaml", "policies: [\n"), {auditPath_}, "", false}, none);
  EXPECT_EQ(broken.exit, kExitError);
}

TEST_F(LearnTest, MergeAddsOnlyWhatTheExistingConfigRefusesAndKeepsItsDenials) {
  auto existing = write("existing.yaml",
                        "credentials:\n"
                        "  openai:\n"
                        "    source: {env: OPENAI_KEY}\n"
                        "    hosts: [api.test]\n"
                        "    inject: {header: Authorization, value: \"Bearer {secret}\"}\n"
                        "policies:\n"
                        "  base:\n"
                        "    allow:\n"
                        "      - host: api.test\n"
                        "        credential: openai\n"
                        "      - host: new.test\n"
                        "        ports: [80]\n"
                        "    deny:\n"
                        "      - host: pkg.test\n"
                        "tasks:\n"
                        "  - name: demo\n"
                        "    policy: base\n");
  LearnOptions o;
  o.merge = existing;
  auto out = learn(o);
  ASSERT_EQ(out.exit, kExitOk) << joined(out.messages) << out.config;
  // api.test and new.test were allowed already; pkg.test stays denied (said so); local.test
  // is the one addition.
  EXPECT_NE(out.config.find("learned-demo"), std::string::npos) << out.config;
  EXPECT_NE(out.config.find("local.test"), std::string::npos) << out.config;
  EXPECT_EQ(out.config.find("SANDGATE_LEARNED_OPENAI"), std::string::npos) << out.config;
  EXPECT_NE(joined(out.messages).find("pkg.test:443 stays refused"), std::string::npos)
      << joined(out.messages);
  auto cfg = config::loadFile(write("merged.yaml", out.config));
  ASSERT_TRUE(cfg) << out.config;
  auto engine = policy::Engine::compile(*cfg);
  ASSERT_TRUE(engine);
  auto suite = config::loadTestSuite(write("merged.tests.yaml", out.tests));
  ASSERT_TRUE(suite);
  for (const auto& tc : suite->cases) {
    auto r = policy::runCase(**engine, *cfg, tc);
    EXPECT_TRUE(r.passed) << tc.name << ": " << r.message;
  }

  // Merging again, from a new audit, into the merged config keeps the first proposal.
  auditPath_ = write("more.jsonl", req("forward", "deny", "no_matching_rule", "more.test", 80,
                                       "\"GET\"", "\"/m\""));
  o.merge = write("merged.yaml", out.config);
  auto again = learn(o);
  ASSERT_EQ(again.exit, kExitOk) << joined(again.messages) << again.config;
  EXPECT_NE(again.config.find("learned-demo-2"), std::string::npos) << again.config;
  auto cfg2 = config::loadFile(write("merged2.yaml", again.config));
  ASSERT_TRUE(cfg2) << again.config;
  auto engine2 = policy::Engine::compile(*cfg2);
  ASSERT_TRUE(engine2);
  for (const char* url : {"http://local.test/", "http://more.test/m"}) {
    auto t = std::get<policy::CheckTarget>(policy::parseCheckTarget(url));
    EXPECT_TRUE(policy::checkTarget(**engine2, *cfg2, "demo", t, std::nullopt).decision.allowed())
        << url << "\n"
        << again.config;
  }
}

}  // namespace
}  // namespace sandgate::learn
