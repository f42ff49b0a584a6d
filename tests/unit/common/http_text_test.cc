// common/http_text.h: optional whitespace, list elements, case-insensitive names.
#include "common/http_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sandgate {
namespace {

TEST(HttpText, TrimOwsRemovesSpacesAndTabsOnlyAroundTheValue) {
  EXPECT_EQ(trimOws(" \t gzip \t"), "gzip");
  EXPECT_EQ(trimOws("a b"), "a b");
  EXPECT_EQ(trimOws(" \t "), "");
  EXPECT_EQ(trimOws("\rx"), "\rx");  // only SP and HTAB are optional whitespace
}

TEST(HttpText, ListElementsAreTrimmedAndEmptyOnesSkipped) {
  std::vector<std::string> got;
  forEachListElement(" keep-alive ,, Upgrade,\tX-Foo ,",
                     [&](std::string_view e) { got.emplace_back(e); });
  EXPECT_EQ(got, (std::vector<std::string>{"keep-alive", "Upgrade", "X-Foo"}));
}

TEST(HttpText, IequalsFoldsAsciiOnly) {
  EXPECT_TRUE(iequals("Content-Length", "content-LENGTH"));
  EXPECT_FALSE(iequals("content-length", "content-lengt"));
  EXPECT_FALSE(iequals("\xc4", "\xe4"));  // no folding beyond ASCII
}

}  // namespace
}  // namespace sandgate
