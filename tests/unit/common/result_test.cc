#include "common/result.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

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
  EXPECT_EQ(good.errorText(), "");
  Result<int> bad(Diagnostics{{"f", 1, 2, "", "one"}, {"f", 2, 1, "", "two"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.errors().size(), 2u);
  EXPECT_EQ(bad.errorText(), "f:1:2: one\nf:2:1: two");
  EXPECT_EQ(joinDiagnostics(bad.errors()), bad.errorText());
}

TEST(Result, AccessorsReachTheValue) {
  Result<std::string> s(std::string("abc"));
  EXPECT_EQ(s->size(), 3u);
  s.value() += "d";
  EXPECT_EQ(*s, "abcd");
  Result<std::unique_ptr<int>> moved(std::make_unique<int>(7));
  std::unique_ptr<int> out = std::move(moved).value();  // a move-only value leaves by rvalue
  ASSERT_TRUE(out);
  EXPECT_EQ(*out, 7);
}

TEST(Result, VoidIsOkOrDiagnostics) {
  auto check = [](bool fine) -> Result<void> {
    if (!fine) return Diagnostic{"f", 1, 0, "k", "bad"};
    return {};
  };
  EXPECT_TRUE(check(true).ok());
  EXPECT_TRUE(check(true).errors().empty());
  auto bad = check(false);
  ASSERT_FALSE(bad);
  ASSERT_EQ(bad.errors().size(), 1u);
  EXPECT_EQ(bad.errorText(), "f:1: k: bad");
}

TEST(Error, RendersMessageThenReason) {
  EXPECT_EQ((Error{"unknown_task", "no task 'x'"}).str(), "no task 'x' (unknown_task)");
  EXPECT_EQ((Error{"", "connect to /s: refused"}).str(), "connect to /s: refused");
}

TEST(Expected, ValueOrOneError) {
  Expected<int> good(5);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 5);
  EXPECT_EQ(good.value(), 5);
  EXPECT_EQ(good.errorText(), "");
  Expected<int> bad(Error{"bad_request", "expected one JSON object"});
  ASSERT_FALSE(bad.ok());
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.error().reason, "bad_request");
  EXPECT_EQ(bad.error().message, "expected one JSON object");
  EXPECT_EQ(bad.errorText(), "expected one JSON object (bad_request)");
}

TEST(Expected, VoidIsOkOrOneError) {
  auto adopt = [](bool fine) -> Expected<void> {
    if (!fine) return Error{"not_a_listener", "fd 3 is not listening"};
    return {};
  };
  EXPECT_TRUE(adopt(true).ok());
  auto bad = adopt(false);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().reason, "not_a_listener");
  // An error passes from one Expected to another of a different value type.
  Expected<std::string> forwarded = bad.error();
  EXPECT_EQ(forwarded.error().message, "fd 3 is not listening");
}

}  // namespace
}  // namespace sandgate
