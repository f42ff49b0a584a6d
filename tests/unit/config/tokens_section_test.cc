// Tests of `tokens:` (section_readers.cc's readTokens): the keys that sign task tokens, their
// algorithms and revocation, and the key files a sandbox must never see.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::expectOne;
using testing::loadErrors;
using testing::loadOk;

TEST(TokensSection, KeysAlgorithmsAndRevocation) {
  auto cfg = loadOk(R"(tokens:
  keys:
    - { id: k2026a, file: /run/secrets/hs }
    - { id: ed-1, algorithm: EdDSA, file: /etc/sandgate/ed.pub,
        revoked_before: "2026-11-01T00:00:00Z" }
    - { id: es.1, algorithm: ES256, file: es.pub, revoked_before: 1700000000 }
  max_ttl: 2h
  leeway: 0
  revoked: [jti-a, jti-b]
)");
  ASSERT_TRUE(cfg.tokens.has_value());
  const auto& t = *cfg.tokens;
  ASSERT_EQ(t.keys.size(), 3u);
  EXPECT_EQ(t.keys[0].algorithm, TokenKey::Algorithm::kHS256);  // the default
  EXPECT_EQ(t.keys[1].algorithm, TokenKey::Algorithm::kEdDSA);
  EXPECT_EQ(t.keys[1].revokedBefore, 1793491200);
  EXPECT_EQ(t.keys[2].algorithm, TokenKey::Algorithm::kES256);
  EXPECT_EQ(t.keys[2].revokedBefore, 1700000000);
  EXPECT_EQ(t.maxTtl, Seconds(7200));
  EXPECT_EQ(t.leeway, Seconds(0));
  EXPECT_EQ(t.revoked, (std::vector<std::string>{"jti-a", "jti-b"}));
  // The shared HS256 key mints tokens: hidden from sandboxes; public keys need not be.
  auto hidden = cfg.secretPaths();
  EXPECT_NE(std::find(hidden.begin(), hidden.end(), "/run/secrets/hs"), hidden.end());
  EXPECT_EQ(std::find(hidden.begin(), hidden.end(), "/etc/sandgate/ed.pub"), hidden.end());
  EXPECT_FALSE(loadOk("policies: {}\n").tokens.has_value());
}

TEST(TokensSection, MistakesAreReportedWhereTheyAre) {
  expectOne(loadErrors("tokens:\n  keys:\n    - { id: k, algorithm: none, file: f }\n"),
            {3, 27, "tokens.keys[0].algorithm", "expected HS256, EdDSA or ES256"});
  expectOne(loadErrors("tokens:\n  keys:\n    - { id: k, algorithm: RS256, file: f }\n"),
            {3, 27, "tokens.keys[0].algorithm", "expected HS256, EdDSA or ES256"});
  expectOne(loadErrors("tokens:\n  keys:\n    - { id: k, file: f }\n    - { id: k, file: g }\n"),
            {4, 13, "tokens.keys[1].id", "duplicate key id `k`"});
  expectOne(loadErrors("tokens:\n  keys:\n    - { id: k }\n"),
            {3, 7, "tokens.keys[0]", "missing required key `file`"});
  expectOne(loadErrors("tokens:\n  keys:\n    - { id: k, file: f, revoked_before: yesterday }\n"),
            {3, 41, "tokens.keys[0].revoked_before", "expected a UTC time"});
  expectOne(loadErrors("tokens: { max_ttl: 1h }\n"), {1, 1, "tokens", "missing required key `keys`"});
  expectOne(loadErrors("tokens: { keys: [ { id: k, file: f } ], ttl: 1h }\n"),
            {1, 41, "tokens.ttl", ""});
}

}  // namespace
}  // namespace sandgate::config
