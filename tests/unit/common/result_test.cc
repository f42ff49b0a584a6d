#include "common/result.h"

#include <gtest/gtest.h>

namespace sandgate {
namespace {

TEST(Diagnostic, RendersEveryKnownPart) {
  EXPECT_EQ((Diagnostic{"a.yaml", 3, 7, "policies.x.allow[0].host", "bad"}).str(),
            "a.yaml:3:7: policies.x.allow[0].host: bad");
  EXPECT_EQ((Diagnostic{"a.yaml", 3, 0, "", "bad"}).str(), "a.yaml:3: bad");
  EXPECT_EQ((Diagnostic{"", 0, 0, "k", "bad"}).str(), "k: bad");
}

TEST(Result, ValueOrErrors) {
  Result<int> good(5);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 5);
  Result<int> bad(Diagnostics{{"f", 1, 2, "", "one"}, {"f", 2, 1, "", "two"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.errors().size(), 2u);
  EXPECT_EQ(bad.errorText(), "f:1:2: one\nf:2:1: two");
}

}  // namespace
}  // namespace sandgate
