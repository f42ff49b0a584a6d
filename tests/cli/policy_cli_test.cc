// End-to-end tests of `sandgate policy lint | check | test`, running the built binary.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/run_process.h"

namespace sandgate {
namespace {

namespace fs = std::filesystem;
using testing::ProcessResult;
using testing::runProcess;

constexpr const char* kConfig = R"(# test config
listen:
  proxy: 127.0.0.1:0
resolve:
  local.test: 127.0.0.1
  intranet.test: 127.0.0.1
credentials:
  llm:
    source: { env: SANDGATE_TEST_LLM_KEY }
    optional: true
    hosts: [api.llm.test]
    inject: { header: Authorization, value: "Bearer {secret}" }
policies:
  base:
    allow:
      - host: registry.npmjs.org
  agent:
    include: [base]
    allow:
      - host: api.llm.test
        methods: [POST]
        paths: [/v1/responses, "/v1/models/**"]
        credential: llm
      - host: "*.githubusercontent.com"
      - host: plain.test
        ports: [80]
      - host: intranet.test
        cidrs: [127.0.0.0/8]
      - host: local.test
      - host: audited.test
        methods: [GET]
        mode: audit
    deny:
      - host: gist.githubusercontent.com
global:
  deny:
    - host: metadata.google.internal
tasks:
  - name: demo
    policy: agent
)";

class PolicyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sandgate-cli-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    config_ = write("config.yaml", kConfig);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    auto p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }

  ProcessResult run(std::vector<std::string> args) {
    args.insert(args.begin(), SANDGATE_BINARY);
    return runProcess(args);
  }

  ProcessResult check(const std::string& target, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"policy", "check", "--config", config_, "--task", "demo"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(target);
    return run(args);
  }

  boost::json::object checkJson(const std::string& target, std::vector<std::string> extra = {}) {
    extra.push_back("--json");
    auto r = check(target, extra);
    EXPECT_TRUE(r.status == 0 || r.status == 1) << r.err;
    return boost::json::parse(r.out).as_object();
  }

  fs::path dir_;
  std::string config_;
};

TEST_F(PolicyCli, LintAcceptsTheShippedExamples) {
  for (const auto& entry :
       fs::directory_iterator(fs::path(SANDGATE_SOURCE_DIR) / "config/examples")) {
    if (entry.path().extension() != ".yaml" || entry.path().string().ends_with(".tests.yaml")) {
      continue;
    }
    SCOPED_TRACE(entry.path().string());
    auto r = run({"policy", "lint", entry.path().string()});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find(": ok"), std::string::npos) << r.out;
  }
}

TEST_F(PolicyCli, LintAcceptsTestConfig) {
  auto r = run({"policy", "lint", config_});
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(PolicyCli, LintReportsTypoWithPosition) {
  auto bad = write("bad.yaml", "policies:\n  p:\n    alow:\n      - host: a.test\n");
  auto r = run({"policy", "lint", bad});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(bad + ":3:5: policies.p.alow"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("allow"), std::string::npos) << r.err;  // the suggestion
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(PolicyCli, LintReportsBadPatternFromPolicyCompiler) {
  auto bad = write("bad.yaml",
                   "policies:\n  p:\n    allow:\n      - host: \"*.com\"\n"
                   "tasks:\n  - name: t\n    policy: p\n");
  auto r = run({"policy", "lint", bad});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(bad + ":4:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("policies.p.allow[0].host"), std::string::npos) << r.err;
}

TEST_F(PolicyCli, LintMissingFile) {
  auto r = run({"policy", "lint", (dir_ / "nope.yaml").string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("nope.yaml"), std::string::npos) << r.err;
}

struct CheckCase {
  const char* name;
  const char* target;
  std::vector<std::string> extra;
  int status;
  const char* verdict;
  const char* reason;
  int ruleLine;  // 0: no rule
};

TEST_F(PolicyCli, CheckDecisions) {
  const CheckCase cases[] = {
      {"included_policy", "registry.npmjs.org:443", {}, 0, "allow", "allowed", 16},
      {"default_port_443", "registry.npmjs.org", {}, 0, "allow", "allowed", 16},
      {"wrong_port", "registry.npmjs.org:80", {}, 1, "deny", "port_not_allowed", 16},
      {"unknown_host", "example.org:443", {}, 1, "deny", "no_matching_rule", 0},
      {"wildcard", "raw.githubusercontent.com:443", {}, 0, "allow", "allowed", 24},
      {"deny_beats_allow", "gist.githubusercontent.com:443", {}, 1, "deny", "denied_by_rule", 34},
      {"global_deny", "metadata.google.internal:443", {}, 1, "deny", "global_deny", 37},
      {"plain_http_url", "http://plain.test/x", {}, 0, "allow", "allowed", 25},
      {"https_url_method_ok",
       "https://api.llm.test/v1/responses",
       {"--method", "POST"},
       0,
       "allow",
       "allowed",
       20},
      {"url_default_get",
       "https://api.llm.test/v1/responses",
       {},
       1,
       "deny",
       "method_not_allowed",
       20},
      {"path_glob_deep",
       "https://api.llm.test/v1/models/a/b",
       {"--method", "POST"},
       0,
       "allow",
       "allowed",
       20},
      {"path_not_allowed",
       "https://api.llm.test/v2/x",
       {"--method", "POST"},
       1,
       "deny",
       "path_not_allowed",
       20},
      {"loopback_literal", "127.0.0.1:443", {}, 1, "deny", "address_denied", 0},
      {"decimal_loopback", "2130706433:443", {}, 1, "deny", "address_denied", 0},
      {"resolve_override_loopback", "local.test:443", {}, 1, "deny", "address_denied", 0},
      {"resolve_override_cidr_opened", "intranet.test:443", {}, 0, "allow", "allowed", 27},
      {"audit_mode",
       "https://audited.test/",
       {"--method", "POST"},
       0,
       "audit",
       "method_not_allowed",
       30},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto o = checkJson(c.target, c.extra);
    EXPECT_EQ(o["verdict"].as_string(), c.verdict);
    EXPECT_EQ(o["reason"].as_string(), c.reason);
    std::string rule(o["rule"].as_string());
    if (c.ruleLine == 0) {
      if (std::string(c.reason) == "no_matching_rule") {
        EXPECT_EQ(rule, "");
      }
    } else {
      EXPECT_EQ(rule, config_ + ":" + std::to_string(c.ruleLine));
    }
    auto r = check(c.target, c.extra);
    EXPECT_EQ(r.status, c.status) << r.out << r.err;
  }
}

TEST_F(PolicyCli, CheckHumanOutputNamesReasonAndRule) {
  auto r = check("gist.githubusercontent.com:443");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("deny gist.githubusercontent.com:443 (task demo)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("reason: denied_by_rule"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rule:   " + config_ + ":34"), std::string::npos) << r.out;
}

TEST_F(PolicyCli, CheckVetsResolveOverrideAndNamesTheRuleToFix) {
  auto o = checkJson("local.test:443");
  EXPECT_EQ(o["reason"].as_string(), "address_denied");
  EXPECT_EQ(o["resolved"].as_string(), "127.0.0.1");
  std::string detail(o["detail"].as_string());
  EXPECT_NE(detail.find("127.0.0.1 is loopback"), std::string::npos) << detail;
  EXPECT_NE(detail.find("policies.agent.allow[4]"), std::string::npos) << detail;
}

TEST_F(PolicyCli, CheckInterceptionIsShown) {
  auto o = checkJson("api.llm.test:443");
  EXPECT_EQ(o["verdict"].as_string(), "allow");
  EXPECT_TRUE(o["intercept"].as_bool());
  EXPECT_EQ(o["credential"].as_string(), "llm");
}

// One host, the credential on GET /v1/** only, /public/** without: valid, but the credential
// binds to the first rule's requests alone, so lint says so.
constexpr const char* kMixedConfig = R"(credentials:
  llm:
    source: { env: SANDGATE_TEST_LLM_KEY }
    optional: true
    hosts: [api.llm.test]
    inject: { header: Authorization, value: "Bearer {secret}" }
policies:
  agent:
    allow:
      - host: api.llm.test
        methods: [GET]
        paths: ["/v1/**"]
        credential: llm
      - host: api.llm.test
        paths: ["/public/**"]
tasks:
  - name: demo
    policy: agent
)";

TEST_F(PolicyCli, LintWarnsWhenOneHostHasRulesWithAndWithoutACredential) {
  auto mixed = write("mixed.yaml", kMixedConfig);
  auto r = run({"policy", "lint", mixed});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(": ok"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("warning: " + mixed + ":14:15: policies.agent.allow[1].host"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("policies.agent.allow[1] admits get no credential"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("placeholder_misplaced"), std::string::npos) << r.err;
  // The test config mixes nothing on one host: no warning.
  auto clean = run({"policy", "lint", config_});
  EXPECT_EQ(clean.err.find("warning"), std::string::npos) << clean.err;
}

TEST_F(PolicyCli, CheckShowsTheCredentialATargetGets) {
  auto r = check("https://api.llm.test/v1/responses", {"--method", "POST"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("  credential: llm (injected into header Authorization; its placeholder is "
                       "honoured only there)"),
            std::string::npos)
      << r.out;
  auto o = checkJson("https://api.llm.test/v1/responses", {"--method", "POST"});
  EXPECT_EQ(o["credential"].as_string(), "llm");
  EXPECT_EQ(o["injected_into"].as_string(), "header Authorization");
  // Another rule of the same host: no credential, and a placeholder would be refused.
  config_ = write("mixed.yaml", kMixedConfig);
  r = check("https://api.llm.test/public/echo", {"--method", "POST"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("  credential: none (a placeholder sent on this request is refused)"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(checkJson("https://api.llm.test/public/echo").contains("injected_into"));
  r = check("https://api.llm.test/v1/models");
  EXPECT_NE(r.out.find("  credential: llm (injected into header Authorization"), std::string::npos)
      << r.out;
}

TEST_F(PolicyCli, CheckUsageErrorsExitTwo) {
  EXPECT_EQ(run({"policy", "check", "--config", config_, "--task", "nobody", "a.test:443"}).status,
            2);
  EXPECT_EQ(check("ftp://a.test/").status, 2);
  EXPECT_EQ(check("user@a.test:443").status, 2);
  EXPECT_EQ(check("a.test:99999").status, 2);
  EXPECT_EQ(run({"policy", "check", "--task", "demo", "a.test:443"}).status, 2);  // no --config
  auto badConfig = write("bad.yaml", "tasks: 3\n");
  auto r = run({"policy", "check", "--config", badConfig, "--task", "demo", "a.test:443"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find(badConfig + ":1:"), std::string::npos) << r.err;
}

TEST_F(PolicyCli, TestRunnerPassesAndFails) {
  auto good =
      write("good.tests.yaml",
            "config: config.yaml\n"
            "cases:\n"
            "  - {task: demo, target: registry.npmjs.org:443, expect: allow}\n"
            "  - {task: demo, target: example.org, expect: deny, reason: no_matching_rule}\n"
            "  - {task: demo, target: \"https://api.llm.test/v1/responses\", method: POST,"
            " expect: allow}\n");
  auto r = run({"policy", "test", good});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("3 passed, 0 failed"), std::string::npos) << r.out;

  auto bad = write("bad.tests.yaml",
                   "- {task: demo, target: registry.npmjs.org:443, expect: allow}\n"
                   "- {task: demo, target: example.org, expect: allow}\n"
                   "- {task: demo, target: gist.githubusercontent.com, expect: deny, reason: "
                   "no_matching_rule}\n");
  r = run({"policy", "test", "--config", config_, bad});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL " + bad + ":2:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expected allow, got deny (no_matching_rule)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAIL " + bad + ":3:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expected reason no_matching_rule, got deny (denied_by_rule"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 passed, 2 failed"), std::string::npos) << r.out;
}

TEST_F(PolicyCli, TestRunnerRejectsBrokenTestFile) {
  auto broken = write("broken.tests.yaml", "- {task: demo, target: a.test, expect: maybe}\n");
  auto r = run({"policy", "test", "--config", config_, broken});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find(broken + ":1:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("expected allow or deny"), std::string::npos) << r.err;
  auto noConfig = write("noconfig.tests.yaml", "- {task: demo, target: a.test, expect: deny}\n");
  r = run({"policy", "test", noConfig});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("no config"), std::string::npos) << r.err;
}

TEST_F(PolicyCli, ShippedPolicyTestsPass) {
  auto examples = fs::path(SANDGATE_SOURCE_DIR) / "config/examples";
  auto r = run({"policy", "test", (examples / "coding-agent.tests.yaml").string()});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(" passed, 0 failed"), std::string::npos) << r.out;
}

TEST_F(PolicyCli, HelpOnEveryCommand) {
  const std::vector<std::vector<std::string>> commands = {{"--help"},
                                                          {"policy", "--help"},
                                                          {"policy", "lint", "--help"},
                                                          {"policy", "check", "--help"},
                                                          {"policy", "test", "--help"}};
  for (const auto& c : commands) {
    auto r = run(c);
    EXPECT_EQ(r.status, 0) << c.back();
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
  }
  EXPECT_EQ(run({"policy"}).status, 2);
  EXPECT_EQ(run({"nonsense"}).status, 2);
}

}  // namespace
}  // namespace sandgate
