// Tests for broker/task_secrets.cc: the compiled scrub set a task's connections share.
#include "broker/task_secrets.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "broker/scrubber.h"

namespace sandgate::broker {
namespace {

// Every configured secret is scrubbed (issue #38), so a task's set is compiled once and shared
// between its connections (TaskSecrets::compiledFor): the same forms and placeholders give the
// same set; a rotation's new forms give another, and the old one is dropped.
TEST(TaskSecretsCompiled, OneSetPerFormsSharedAndDroppedAfterARotation) {
  TaskSecrets secrets(nullptr, config::Credentials{}, {});
  auto formsOf = [](std::string_view secret) {
    return std::make_shared<const std::vector<SecretForm>>(
        std::vector<SecretForm>{{"k", Secret::copyOf(secret), std::nullopt}});
  };
  auto forms = formsOf("first-secret-0123456789abcdef");
  auto set = secrets.compiledFor(forms, nullptr);
  EXPECT_EQ(secrets.compiledFor(forms, nullptr), set);
  Scrubber s(set);
  std::string out;
  s.feed("a first-secret-0123456789abcdef b", out);
  s.finish(out);
  EXPECT_EQ(out, "a [REDACTED:k] b");
  auto rotated = formsOf("second-secret-0123456789abcdef");
  auto next = secrets.compiledFor(rotated, nullptr);
  EXPECT_NE(next, set);
  EXPECT_EQ(secrets.compiledFor(rotated, nullptr), next);
  EXPECT_NE(secrets.compiledFor(forms, nullptr), set);  // compiled again: it was dropped
}

}  // namespace
}  // namespace sandgate::broker
