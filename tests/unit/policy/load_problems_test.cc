// Tests for policy/load_problems.cc (and reviewPartial in compiler.cc): a config with load
// errors still gets the rule compiler's errors, each problem once, never one that only follows
// from a part the loader already reported.
#include "policy/load_problems.h"

#include <gtest/gtest.h>

#include <string>

#include "config/load_report.h"

namespace sandgate::policy {
namespace {

std::string joined(const Diagnostics& d) { return joinDiagnostics(d); }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct Case {
  const char* name;
  const char* yaml;
  std::vector<std::string> present;  // each once, at "f.yaml:LINE:COL"
  std::vector<std::string> absent;   // what would only repeat the loader
};

TEST(LoadProblems, CompilerErrorsJoinTheLoadersAndNothingRepeats) {
  const Case cases[] = {
      {"schema_error_and_bad_pattern",
       "policies:\n  p:\n    alow: []\n    allow:\n      - host: \"*.com\"\n",
       {"f.yaml:3:5:", "f.yaml:5:15:"},
       {}},
      {"unreadable_host_is_not_also_a_rule_without_host",
       "policies:\n  p:\n    allow:\n      - host: [a.test]\n      - host: \"re:(\"\n",
       {"f.yaml:4:15:", "f.yaml:5:15:"},
       {"needs a host"}},
      {"unknown_credential_said_once_and_makes_no_tie",
       "policies:\n  p:\n    allow:\n      - host: a.test\n        credential: nokey\n"
       "      - host: a.test\n      - host: \"*.co.uk\"\n",
       {"f.yaml:5:21:", "f.yaml:7:15:"},
       {"unknown credential \"nokey\"", "equal specificity"}},
      {"unknown_include_and_task_policy_said_once",
       "policies:\n  p:\n    include: [nope]\n    allow:\n      - host: 10.0.0.0/33\n"
       "        cidrs: [10.0.0.0/33]\n"
       "tasks:\n  - name: t\n    policy: gone\n",
       {"f.yaml:3:15:", "f.yaml:6:17:", "f.yaml:9:13:"},
       {"unknown policy \"nope\"", "unknown policy \"gone\""}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto report = config::readString(c.yaml, "f.yaml");
    ASSERT_FALSE(report.errors.empty());
    ASSERT_TRUE(report.config.has_value());
    const std::string text = joined(loadProblems(report));
    for (const auto& at : c.present) EXPECT_EQ(count(text, at), 1u) << at << " in\n" << text;
    for (const auto& what : c.absent) EXPECT_EQ(count(text, what), 0u) << what << " in\n" << text;
  }
}

TEST(LoadProblems, NothingToReviewWithoutAConfig) {
  auto report = config::readString("policies: [\n", "f.yaml");
  ASSERT_FALSE(report.config.has_value());
  EXPECT_EQ(loadProblems(report).size(), report.errors.size());
}

TEST(LoadProblems, NoneForAConfigThatLoads) {
  auto report =
      config::readString("policies:\n  p:\n    allow:\n      - host: \"*.com\"\n", "f.yaml");
  ASSERT_TRUE(report.errors.empty());
  EXPECT_TRUE(loadProblems(report).empty());  // Engine::compile reports its own
}

}  // namespace
}  // namespace sandgate::policy
