// Basic proxy credentials and token hashes (proxy/identity/proxy_auth.h).
#include "proxy/identity/proxy_auth.h"

#include <gtest/gtest.h>

#include <string>

#include "common/encoding.h"

namespace sandgate::proxy {
namespace {

// sha256("s3cret")
constexpr const char* kHash = "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0";

TEST(ProxyAuth, ParsesBasic) {
  auto c = parseBasicAuth("Basic ZGVtbzpzM2NyZXQ=");  // demo:s3cret
  ASSERT_TRUE(c);
  EXPECT_EQ(c->task, "demo");
  EXPECT_EQ(c->token, "s3cret");
  c = parseBasicAuth("basic ZGVtbzpzM2NyZXQ=");
  ASSERT_TRUE(c);
  c = parseBasicAuth("Basic ZGVtbzphOmI=");  // demo:a:b (token may contain ':')
  ASSERT_TRUE(c);
  EXPECT_EQ(c->token, "a:b");
}

TEST(ProxyAuth, RefusesMalformed) {
  for (const char* v : {"Bearer ZGVtbzpzM2NyZXQ=", "Basic", "Basic ", "Basic ZGVtbzpzM2NyZXQ",
                        "Basic ZGVt*zpzM2NyZXQ=", "Basic ZGVtbw==" /* no colon */,
                        "Basic OnRva2Vu" /* empty task */, "Basic =GVtbzpzM2NyZXQ="}) {
    EXPECT_FALSE(parseBasicAuth(v)) << v;
  }
}

// A task token of 3 to 8 KB (claims with many hosts) must reach the token verifier: refused
// here, it was taken for a static token and refused as auth_invalid, not for what it is.
TEST(ProxyAuth, RoomForTheLongestTaskToken) {
  for (size_t tokenBytes : {size_t{3000}, size_t{6000}, size_t{8192}, size_t{9000}}) {
    SCOPED_TRACE(tokenBytes);
    const std::string token = "eyJ" + std::string(tokenBytes - 3, 'a');
    auto c = parseBasicAuth("Basic " + base64Encode("task-with-a-long-name:" + token));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->token, token);
  }
  // Still bounded: a value past kMaxBasicBytes is not decoded at all.
  EXPECT_FALSE(parseBasicAuth("Basic " + base64Encode("t:" + std::string(kMaxBasicBytes, 'a'))));
}

TEST(ProxyAuth, TokenHash) {
  auto h = parseTokenHash(kHash);
  ASSERT_TRUE(h);
  EXPECT_TRUE(tokenMatches("s3cret", *h));
  EXPECT_FALSE(tokenMatches("s3cre", *h));
  EXPECT_FALSE(tokenMatches("", *h));
  EXPECT_FALSE(parseTokenHash("abc"));
  EXPECT_FALSE(parseTokenHash(std::string(64, 'g')));
  EXPECT_TRUE(parseTokenHash(std::string(64, 'A')));
}

}  // namespace
}  // namespace sandgate::proxy
