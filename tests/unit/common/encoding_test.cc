// Tests for common/encoding.cc: base64 (strict decode) and percent-encoding.
#include "common/encoding.h"

#include <gtest/gtest.h>

namespace sandgate {
namespace {

TEST(Base64, RoundTripTable) {
  const std::pair<std::string, std::string> cases[] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"git:ghp_abc", "Z2l0OmdocF9hYmM="},
      {std::string("\0\xff\xfe", 3), "AP/+"},
  };
  for (const auto& [plain, encoded] : cases) {
    EXPECT_EQ(base64Encode(plain), encoded);
    auto back = base64Decode(encoded);
    ASSERT_TRUE(back.has_value()) << encoded;
    EXPECT_EQ(*back, plain);
  }
}

TEST(Base64, DecodeRejects) {
  const char* cases[] = {"Zg", "Zg=", "Z===", "Zg==Zg==", "Zm9v\n", "Zm 9", "Zm9-", "=Zm9"};
  for (const char* c : cases) EXPECT_FALSE(base64Decode(c).has_value()) << c;
}

TEST(Percent, EncodeTable) {
  const std::pair<std::string, std::string> cases[] = {
      {"abc-._~XYZ09", "abc-._~XYZ09"},
      {"a b&c=d", "a%20b%26c%3Dd"},
      {"k/+?#%", "k%2F%2B%3F%23%25"},
      {"\xc3\xa4", "%C3%A4"},
  };
  for (const auto& [in, want] : cases) {
    EXPECT_EQ(percentEncode(in), want);
    auto back = percentDecode(want, false);
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, in);
  }
}

TEST(Percent, DecodeTable) {
  EXPECT_EQ(percentDecode("a+b", true).value(), "a b");
  EXPECT_EQ(percentDecode("a+b", false).value(), "a+b");
  EXPECT_EQ(percentDecode("%73k", false).value(), "sk");
  EXPECT_FALSE(percentDecode("%", false));
  EXPECT_FALSE(percentDecode("%4", false));
  EXPECT_FALSE(percentDecode("%zz", false));
  EXPECT_FALSE(percentDecode("ab%", false));
}

}  // namespace
}  // namespace sandgate
