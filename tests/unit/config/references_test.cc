// Tests of references between sections: includes, cycles, task policies, rule credentials.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::Expected;
using testing::expectOne;
using testing::loadErrors;
using testing::loadOk;

TEST(References, ValidIncludesAndDiamonds) {
  // A diamond (d includes b and c, both include a) is sharing, not a cycle.
  auto c = loadOk(
      "policies:\n"
      "  a: {}\n"
      "  b: {include: [a]}\n"
      "  c: {include: [a]}\n"
      "  d: {include: [b, c]}\n"
      "tasks: [{name: t, policy: d}]\n");
  EXPECT_EQ(c.policies.at("d").include.size(), 2u);
}

TEST(References, Cycles) {
  struct Case {
    const char* name;
    const char* yaml;
    Expected want;
  };
  const Case cases[] = {
      {"self",
       "policies:\n  a: {include: [a]}\n",
       {2, 17, "policies.a.include[0]", "include cycle: a -> a"}},
      {"three",
       "policies:\n  a: {include: [b]}\n  b: {include: [c]}\n  c: {include: [a]}\n",
       {4, 17, "policies.c.include[0]", "include cycle: a -> b -> c -> a"}},
      {"cycle below an entry point",
       "policies:\n  a: {include: [b]}\n  b: {include: [c]}\n  c: {include: [b]}\n",
       {4, 17, "policies.c.include[0]", "include cycle: b -> c -> b"}},
      {"second include closes it",
       "policies:\n  a: {include: [x, b]}\n  b: {include: [a]}\n  x: {}\n",
       {3, 17, "policies.b.include[0]", "include cycle: a -> b -> a"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expectOne(loadErrors(c.yaml), c.want);
  }
}

TEST(References, TwoSeparateCyclesAreBothReported) {
  auto errors = loadErrors(
      "policies:\n"
      "  a: {include: [b]}\n"
      "  b: {include: [a]}\n"
      "  c: {include: [d]}\n"
      "  d: {include: [c]}\n");
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].message, "include cycle: a -> b -> a");
  EXPECT_EQ(errors[1].message, "include cycle: c -> d -> c");
}

TEST(References, UnknownNames) {
  struct Case {
    const char* name;
    const char* yaml;
    Expected want;
  };
  const Case cases[] = {
      {"include with hint",
       "policies:\n  pypi: {}\n  a: {include: [pipy]}\n",
       {3, 17, "policies.a.include[0]", "unknown policy `pipy`; did you mean `pypi`?"}},
      {"include without hint",
       "policies:\n  pypi: {}\n  a: {include: [npm]}\n",
       {3, 17, "policies.a.include[0]", "unknown policy `npm`; defined: a, pypi"}},
      {"task policy none defined",
       "tasks: [{name: t, policy: p}]\n",
       {1, 27, "tasks[0].policy", "unknown policy `p`; none are defined"}},
      {"global rule credential",
       "credentials:\n  openai: {source: {env: K}, hosts: [a], inject: {header: X}}\n"
       "global:\n  allow:\n    - host: a\n      credential: opanai\n",
       {6, 19, "global.allow[0].credential",
        "unknown credential `opanai`; did you mean `openai`?"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expectOne(loadErrors(c.yaml), c.want);
  }
}

TEST(References, LongListOfKnownNamesIsCut) {
  std::string yaml = "policies:\n";
  for (int i = 0; i < 12; ++i) yaml += "  policy" + std::to_string(10 + i) + ": {}\n";
  yaml += "tasks: [{name: t, policy: zzzzzzzz}]\n";
  auto errors = loadErrors(yaml);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("policy10, policy11,"), std::string::npos);
  EXPECT_NE(errors[0].message.find("policy19, ..."), std::string::npos) << errors[0].message;
}

}  // namespace
}  // namespace sandgate::config
