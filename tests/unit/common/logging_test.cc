// Tests for common/logging.cc: level and format values and where they come from (flag over
// variable), and the JSON string escaping every JSON log line relies on.
#include "common/logging.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace sandgate::logging {
namespace {

TEST(Logging, LevelsAndFormatsAreTheDocumentedWordsOnly) {
  EXPECT_EQ(parseLevel("warn"), Level::kWarn);
  EXPECT_EQ(parseLevel("off"), Level::kOff);
  EXPECT_FALSE(parseLevel("WARN").has_value());
  EXPECT_FALSE(parseLevel("warning").has_value());
  EXPECT_FALSE(parseLevel("").has_value());
  EXPECT_EQ(parseFormat("json"), Format::kJson);
  EXPECT_FALSE(parseFormat("JSON").has_value());
}

TEST(Logging, TheFlagWinsOverTheVariableAndABadValueSaysWhereItCameFrom) {
  ::setenv(kLevelVariable, "debug", 1);
  ::setenv(kFormatVariable, "json", 1);
  auto fromVariable = resolve(std::nullopt, std::nullopt, Level::kWarn);
  ASSERT_TRUE(fromVariable.ok());
  EXPECT_EQ(fromVariable->level, Level::kDebug);
  EXPECT_EQ(fromVariable->format, Format::kJson);
  auto fromFlag = resolve(std::string("error"), std::string("text"), Level::kWarn);
  ASSERT_TRUE(fromFlag.ok());
  EXPECT_EQ(fromFlag->level, Level::kError);
  EXPECT_EQ(fromFlag->format, Format::kText);
  ::setenv(kLevelVariable, "loud", 1);
  auto bad = resolve(std::nullopt, std::nullopt, Level::kWarn);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.errors().front().message,
            "SANDGATE_LOG_LEVEL \"loud\": expected one of trace, debug, info, warn, error, off");
  ::unsetenv(kLevelVariable);
  ::setenv(kFormatVariable, "", 1);  // empty: unset
  auto defaults = resolve(std::nullopt, std::nullopt, Level::kWarn);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->level, Level::kWarn);
  EXPECT_EQ(defaults->format, Format::kText);
  ::unsetenv(kFormatVariable);
}

// A message may hold a workload's bytes (a host, a path): the line must stay one valid JSON
// object whatever they are, and no byte a terminal obeys may pass.
TEST(Logging, JsonStringEscapesEverythingThatCouldBreakOrForgeALine) {
  const std::pair<std::string, std::string> cases[] = {
      {"plain", R"("plain")"},
      {"q\"b\\", R"("q\"b\\")"},
      {"two\nlines", R"("two\nlines")"},
      {"esc\x1b[2K\r", R"("esc\u001b[2K\u000d")"},
      {"del\x7f", R"("del\u007f")"},
      {"caf\xc3\xa9", "\"caf\xc3\xa9\""},           // UTF-8 kept
      {"c1\xc2\x9b", R"("c1\u009b")"},              // CSI as a C1 control
      {"bad\xff\xc3", R"("bad\ufffd\ufffd")"},      // not UTF-8
      {"\xed\xa0\x80", R"("\ufffd\ufffd\ufffd")"},  // a surrogate
      {"\xf0\x9f\x98\x80", "\"\xf0\x9f\x98\x80\""},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(jsonString(in), want) << in;
}

}  // namespace
}  // namespace sandgate::logging
