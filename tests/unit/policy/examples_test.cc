// The shipped example configs, loaded by the real YAML loader and compiled by the policy
// engine: every example must compile, and coding-agent.yaml must decide as its comments and
// its policy-test file say (reason and deciding rule line included).
#include <gtest/gtest.h>

#include "config/config.h"
#include "policy/engine.h"

namespace sandgate::policy {
namespace {

std::string example(const char* name) {
  return std::string(SANDGATE_SOURCE_DIR) + "/config/examples/" + name;
}

TEST(PolicyExamples, AllCompile) {
  for (const char* name : {"quickstart.yaml", "coding-agent.yaml"}) {
    SCOPED_TRACE(name);
    auto cfg = config::loadFile(example(name));
    ASSERT_TRUE(cfg.ok()) << cfg.errorText();
    auto engine = Engine::compile(*cfg);
    EXPECT_TRUE(engine.ok()) << engine.errorText();
  }
}

TEST(PolicyExamples, CodingAgentDecisions) {
  auto cfg = config::loadFile(example("coding-agent.yaml"));
  ASSERT_TRUE(cfg.ok()) << cfg.errorText();
  auto engine = Engine::compile(*cfg);
  ASSERT_TRUE(engine.ok()) << engine.errorText();
  const Engine& e = **engine;

  struct Case {
    const char* name;
    const char* host;
    uint16_t port;
    const char* method;  // nullptr: a CONNECT
    const char* path;
    std::string_view reason;
    bool intercept;
  };
  const Case cases[] = {
      {"npm", "registry.npmjs.org", 443, nullptr, nullptr, reason::kAllowed, false},
      {"npm_port_80", "registry.npmjs.org", 80, nullptr, nullptr, reason::kPortNotAllowed, false},
      {"clone_refs", "github.com", 443, "GET", "/org/repo.git/info/refs", reason::kAllowed, true},
      {"fetch_pack", "github.com", 443, "POST", "/org/repo.git/git-upload-pack", reason::kAllowed,
       true},
      {"push_refused", "github.com", 443, "POST", "/org/repo.git/git-receive-pack",
       reason::kPathNotAllowed, false},
      {"api_post_refused", "api.github.com", 443, "POST", "/repos/org/repo/issues",
       reason::kMethodNotAllowed, false},
      {"raw", "raw.githubusercontent.com", 443, nullptr, nullptr, reason::kAllowed, false},
      {"gist", "gist.githubusercontent.com", 443, nullptr, nullptr, reason::kDeniedByRule, false},
      {"apex", "githubusercontent.com", 443, nullptr, nullptr, reason::kNoMatchingRule, false},
      {"openai_connect", "api.openai.com", 443, nullptr, nullptr, reason::kAllowed, true},
      {"openai_files", "api.openai.com", 443, "POST", "/v1/files", reason::kPathNotAllowed, false},
      {"metadata_name", "metadata.google.internal", 80, nullptr, nullptr, reason::kGlobalDeny,
       false},
      {"metadata_ip", "169.254.169.254", 80, nullptr, nullptr, reason::kGlobalDeny, false},
      {"loopback_decimal", "2130706433", 443, nullptr, nullptr, reason::kAddressDenied, false},
      {"loopback_mapped", "[::ffff:127.0.0.1]", 443, nullptr, nullptr, reason::kAddressDenied,
       false},
      {"private", "10.0.0.1", 443, nullptr, nullptr, reason::kAddressDenied, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Request req;
    auto t = normalizeHost(c.host);
    ASSERT_TRUE(std::holds_alternative<Target>(t));
    req.target = std::get<Target>(t);
    req.port = c.port;
    if (c.method) {
      req.method = c.method;
      req.path = c.path;
    }
    Decision d = e.decide("agent", req);
    EXPECT_EQ(d.reason, c.reason) << d.detail;
    EXPECT_EQ(d.intercept, c.intercept) << d.detail;
    if (d.reason != reason::kNoMatchingRule && d.reason != reason::kAddressDenied) {
      EXPECT_EQ(d.rule.rfind(example("coding-agent.yaml") + ":", 0), 0u) << d.rule;
    }
  }
  Decision openai = e.decide("agent", Request{std::get<Target>(normalizeHost("api.openai.com")),
                                              443, std::nullopt, std::nullopt, std::nullopt});
  EXPECT_EQ(openai.credential, "openai");
}

}  // namespace
}  // namespace sandgate::policy
