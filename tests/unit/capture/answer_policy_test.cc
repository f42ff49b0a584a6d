// Tests for capture/answer_policy.cc: a name resolves when some capture port could be allowed.
#include "capture/answer_policy.h"

#include <gtest/gtest.h>

#include "config/config.h"

namespace sandgate::capture {
namespace {

constexpr const char* kConfig = R"(
policies:
  p:
    allow:
      - host: api.test
        methods: [POST]
        paths: [/v1/x]
      - host: "*.web.test"
        ports: [80]
      - host: other.test
        ports: [8443]
    deny:
      - host: bad.web.test
tasks:
  - name: t
    policy: p
)";

TEST(AnswerPolicy, NameMayBeAllowedOnACapturePort) {
  auto cfg = config::loadString(kConfig, "answer.yaml");
  ASSERT_TRUE(cfg) << cfg.errors().front().str();
  auto engine = policy::Engine::compile(cfg.value());
  ASSERT_TRUE(engine);
  const uint16_t ports[] = {80, 443};
  struct Case {
    const char* name;
    bool expected;
  } cases[] = {
      {"api.test", true},       // method/path rules: decided again per request
      {"x.web.test", true},     // port 80 only
      {"bad.web.test", false},  // denied
      {"web.test", false},      // the apex is not *.web.test
      {"other.test", false},    // only on a port that is not captured
      {"unknown.test", false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(nameMayBeAllowed(*engine.value(), "t", c.name, ports), c.expected) << c.name;
  }
  const uint16_t withExtra[] = {80, 443, 8443};
  EXPECT_TRUE(nameMayBeAllowed(*engine.value(), "t", "other.test", withExtra));
  EXPECT_FALSE(nameMayBeAllowed(*engine.value(), "nosuchtask", "api.test", ports));
}

}  // namespace
}  // namespace sandgate::capture
