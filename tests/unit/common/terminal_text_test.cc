// Tests for common/terminal_text.cc: names quoted as git's core.quotepath quotes them, free text
// with every byte a terminal obeys escaped and readable UTF-8 kept.
#include "common/terminal_text.h"

#include <gtest/gtest.h>

namespace sandgate {
namespace {

TEST(QuoteName, Table) {
  const std::pair<std::string, std::string> cases[] = {
      {"src/main.c", "src/main.c"},
      {"a b", "a b"},
      {"evil\x1b[2K\rok\n", R"("evil\033[2K\rok\n")"},
      {"say\"hi", R"("say\"hi")"},
      {"back\\slash", R"("back\\slash")"},
      {"tab\there", R"("tab\there")"},
      {"\xff\xfe", R"("\377\376")"},
      {"caf\xc3\xa9", R"("caf\303\251")"},  // git's default: every byte >= 0x80
      {"del\x7f", R"("del\177")"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(quoteName(in), want) << want;
}

TEST(EscapeText, Table) {
  const std::pair<std::string, std::string> cases[] = {
      {"plain text: 1 added", "plain text: 1 added"},
      {"caf\xc3\xa9 \xe2\x9c\x93", "caf\xc3\xa9 \xe2\x9c\x93"},  // readable UTF-8 stays
      {"a\tb", "a\tb"},
      {"line\nforged\r\x1b[2K", R"(line\nforged\r\033[2K)"},
      {"\xc2\x9b"
       "31m",
       R"(\302\23331m)"},  // C1 CSI
      {"\xe2\x80\xae"
       "txt",
       R"(\342\200\256txt)"},  // right-to-left override
      {"\xff"
       "x\xc3",
       R"(\377x\303)"},                     // not UTF-8
      {"\xed\xa0\x80", R"(\355\240\200)"},  // a surrogate
      {"\xe0\x80\xaf", R"(\340\200\257)"},  // overlong '/'
      {"back\\slash", "back\\slash"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(escapeText(in), want) << want;
  EXPECT_EQ(escapeText("a\tb", true), R"(a\tb)");
  EXPECT_TRUE(needsEscape("x\x1b"));
  EXPECT_FALSE(needsEscape("caf\xc3\xa9"));
}

}  // namespace
}  // namespace sandgate
