// Tests for proxy/identity/task_token.cc: every way a task token is refused, from the side of
// someone who holds a token (or makes one up) and wants more than it grants; and the three
// algorithms round-tripping through mintToken and verify.
#include "proxy/identity/task_token.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>

#include <boost/json.hpp>
#include <string>

#include "common/encoding.h"
#include "tests/unit/broker/test_util.h"

namespace sandgate::proxy {
namespace {

using Algorithm = config::TokenKey::Algorithm;
using broker::testing::TempDir;
using broker::testing::writeFile;

constexpr int64_t kNow = 1'800'000'000;
const std::string kHsKey = "0123456789abcdef0123456789abcdef-shared-key";

// A fresh key pair as PEM (private, public).
std::pair<std::string, std::string> keyPair(Algorithm alg) {
  EVP_PKEY* pkey = alg == Algorithm::kEdDSA ? EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519")
                                            : EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  EXPECT_NE(pkey, nullptr);
  auto pem = [&](bool priv) {
    BIO* bio = BIO_new(BIO_s_mem());
    if (priv) {
      PEM_write_bio_PrivateKey(bio, pkey, nullptr, nullptr, 0, nullptr, nullptr);
    } else {
      PEM_write_bio_PUBKEY(bio, pkey);
    }
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    std::string out(data, static_cast<size_t>(n));
    BIO_free(bio);
    return out;
  };
  auto out = std::make_pair(pem(true), pem(false));
  EVP_PKEY_free(pkey);
  return out;
}

std::string b64url(std::string_view s) {
  std::string out = base64Encode(s);
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

class TaskTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    writeFile(dir.file("hs.key"), kHsKey + "\n");
    ed = keyPair(Algorithm::kEdDSA);
    es = keyPair(Algorithm::kES256);
    writeFile(dir.file("ed.pub"), ed.second);
    writeFile(dir.file("es.pub"), es.second);
    tokens.keys = {key("h1", Algorithm::kHS256, "hs.key"), key("e1", Algorithm::kEdDSA, "ed.pub"),
                   key("s1", Algorithm::kES256, "es.pub")};
    tokens.maxTtl = config::Seconds(24 * 3600);
    tokens.leeway = config::Seconds(30);
  }

  config::TokenKey key(std::string id, Algorithm alg, const std::string& file) {
    config::TokenKey k;
    k.id = std::move(id);
    k.algorithm = alg;
    k.file = dir.file(file);
    return k;
  }

  std::shared_ptr<const TokenVerifier> verifier() {
    auto v = TokenVerifier::load(tokens, "test.yaml");
    EXPECT_TRUE(v.ok()) << v.errorText();
    return v.ok() ? v.value() : nullptr;
  }

  std::string claims(int64_t exp = kNow + 3600, std::string extra = "") {
    return fmt::format(R"({{"sub":"t1","iat":{},"exp":{},"jti":"j-1"{}}})", kNow, exp, extra);
  }

  std::string mint(const std::string& claimsJson, std::string kid = "h1",
                   Algorithm alg = Algorithm::kHS256) {
    std::string k = alg == Algorithm::kHS256   ? kHsKey
                    : alg == Algorithm::kEdDSA ? ed.first
                                               : es.first;
    auto t = mintToken(alg, kid, k, claimsJson);
    EXPECT_TRUE(t.ok()) << t.errorText();
    return t.ok() ? t.value() : "";
  }

  TempDir dir;
  config::Tokens tokens;
  std::pair<std::string, std::string> ed, es;
};

TEST_F(TaskTokenTest, EachAlgorithmRoundTrips) {
  auto v = verifier();
  ASSERT_TRUE(v);
  for (auto [kid, alg] : {std::pair{"h1", Algorithm::kHS256}, std::pair{"e1", Algorithm::kEdDSA},
                          std::pair{"s1", Algorithm::kES256}}) {
    SCOPED_TRACE(kid);
    const std::string t =
        mint(claims(kNow + 600, R"(,"pol":"p","hosts":["api.test"],"src":"10.0.0.0/8")"), kid, alg);
    EXPECT_TRUE(looksLikeJwt(t));
    auto c = v->verify(t, kNow);
    ASSERT_TRUE(c.ok()) << c.reason << ": " << c.detail;
    EXPECT_EQ(c.claims.task, "t1");
    EXPECT_EQ(c.claims.kid, kid);
    EXPECT_EQ(c.claims.policy, "p");
    EXPECT_EQ(c.claims.exp, kNow + 600);
    EXPECT_EQ(c.claims.hosts, std::vector<std::string>{"api.test"});
    EXPECT_EQ(c.claims.src, "10.0.0.0/8");
  }
}

TEST_F(TaskTokenTest, StaticTokensDoNotLookLikeJwts) {
  EXPECT_FALSE(looksLikeJwt("tok-static-0123"));
  EXPECT_FALSE(looksLikeJwt("a.b.c"));  // not a JSON header
  EXPECT_FALSE(looksLikeJwt(""));
}

TEST_F(TaskTokenTest, TheKeyDecidesTheAlgorithm) {
  auto v = verifier();
  ASSERT_TRUE(v);
  // alg: none, without a signature.
  const std::string none = b64url(R"({"alg":"none","kid":"h1"})") + "." + b64url(claims()) + ".";
  EXPECT_EQ(v->verify(none, kNow).reason, token_reason::kWrongAlgorithm);
  // A token made for another algorithm with the same kid: HS256 over a public key's id.
  EXPECT_EQ(v->verify(mint(claims(), "e1", Algorithm::kHS256), kNow).reason,
            token_reason::kWrongAlgorithm);
  // The classic confusion: HS256 "signed" with the PEM of an EdDSA public key.
  auto confused = mintToken(Algorithm::kHS256, "e1", ed.second, claims());
  ASSERT_TRUE(confused.ok());
  EXPECT_EQ(v->verify(confused.value(), kNow).reason, token_reason::kWrongAlgorithm);
  EXPECT_EQ(v->verify(mint(claims(), "nope"), kNow).reason, token_reason::kUnknownKey);
  EXPECT_EQ(v->verify(b64url(R"({"alg":"HS256"})") + "." + b64url(claims()) + ".c2ln", kNow).reason,
            token_reason::kUnknownKey);
}

TEST_F(TaskTokenTest, ATamperedTokenFailsItsSignature) {
  auto v = verifier();
  ASSERT_TRUE(v);
  for (auto [kid, alg] : {std::pair{"h1", Algorithm::kHS256}, std::pair{"e1", Algorithm::kEdDSA},
                          std::pair{"s1", Algorithm::kES256}}) {
    SCOPED_TRACE(kid);
    const std::string t = mint(claims(), kid, alg);
    const size_t a = t.find('.'), b = t.rfind('.');
    // Other claims under the same signature: another task, a later exp.
    const std::string widened = t.substr(0, a + 1) +
                                b64url(R"({"sub":"admin","iat":1800000000,"exp":1800003600})") +
                                t.substr(b);
    EXPECT_EQ(v->verify(widened, kNow).reason, token_reason::kBadSignature);
    std::string flipped = t;
    flipped[b + 2] = flipped[b + 2] == 'A' ? 'B' : 'A';
    EXPECT_EQ(v->verify(flipped, kNow).reason, token_reason::kBadSignature);
    EXPECT_EQ(v->verify(t.substr(0, b + 1), kNow).reason, token_reason::kBadSignature);
  }
  // A key another orchestrator holds.
  auto other = keyPair(Algorithm::kEdDSA);
  auto forged = mintToken(Algorithm::kEdDSA, "e1", other.first, claims());
  ASSERT_TRUE(forged.ok());
  EXPECT_EQ(v->verify(forged.value(), kNow).reason, token_reason::kBadSignature);
}

TEST_F(TaskTokenTest, TimesWithLeeway) {
  auto v = verifier();
  ASSERT_TRUE(v);
  const std::string t = mint(claims(kNow + 100));
  EXPECT_TRUE(v->verify(t, kNow + 100).ok());
  EXPECT_TRUE(v->verify(t, kNow + 130).ok());  // within the 30 s leeway
  EXPECT_EQ(v->verify(t, kNow + 131).reason, token_reason::kExpired);
  const std::string later =
      mint(fmt::format(R"({{"sub":"t1","nbf":{},"exp":{}}})", kNow + 60, kNow + 600));
  EXPECT_EQ(v->verify(later, kNow).reason, token_reason::kNotYetValid);
  EXPECT_TRUE(v->verify(later, kNow + 31).ok());
  const std::string future =
      mint(fmt::format(R"({{"sub":"t1","iat":{},"exp":{}}})", kNow + 120, kNow + 600));
  EXPECT_EQ(v->verify(future, kNow).reason, token_reason::kNotYetValid);
  // exp at most max_ttl after iat (or now).
  EXPECT_EQ(v->verify(mint(claims(kNow + 25 * 3600)), kNow).reason, token_reason::kTtlTooLong);
  EXPECT_EQ(
      v->verify(mint(fmt::format(R"({{"sub":"t1","exp":{}}})", kNow + 25 * 3600)), kNow).reason,
      token_reason::kTtlTooLong);
}

// A remembered token (its signature checked once) still expires, and another token with the
// same claims but a bad signature is not taken for it.
TEST_F(TaskTokenTest, ARememberedTokenIsStillCheckedEveryTime) {
  auto v = verifier();
  ASSERT_TRUE(v);
  const std::string t = mint(claims(kNow + 100));
  EXPECT_TRUE(v->verify(t, kNow).ok());
  EXPECT_TRUE(v->verify(t, kNow + 1).ok());
  EXPECT_EQ(v->verify(t, kNow + 1000).reason, token_reason::kExpired);
  std::string forged = t;
  forged.back() = forged.back() == 'A' ? 'B' : 'A';
  EXPECT_EQ(v->verify(forged, kNow).reason, token_reason::kBadSignature);
  EXPECT_TRUE(v->verify(t, kNow).ok());
}

TEST_F(TaskTokenTest, RevokedByJtiAndByKey) {
  tokens.revoked = {"j-9", "j-1"};
  auto v = verifier();
  ASSERT_TRUE(v);
  EXPECT_EQ(v->verify(mint(claims()), kNow).reason, token_reason::kRevoked);
  tokens.revoked.clear();
  tokens.keys[0].revokedBefore = kNow + 1;
  v = verifier();
  ASSERT_TRUE(v);
  EXPECT_EQ(v->verify(mint(claims()), kNow).reason, token_reason::kRevoked);  // iat = kNow
  EXPECT_EQ(v->verify(mint(fmt::format(R"({{"sub":"t1","exp":{}}})", kNow + 60)), kNow).reason,
            token_reason::kRevoked);  // no iat: cannot show it came after
  tokens.keys[0].revokedBefore = kNow;
  v = verifier();
  ASSERT_TRUE(v);
  EXPECT_TRUE(v->verify(mint(claims()), kNow).ok());
}

TEST_F(TaskTokenTest, MalformedTokensAreRefusedWithoutCrashing) {
  auto v = verifier();
  ASSERT_TRUE(v);
  const std::string good = mint(claims());
  const std::string sig = good.substr(good.rfind('.'));
  const std::string h = b64url(R"({"alg":"HS256","kid":"h1"})");
  const std::vector<std::string> bad = {
      "",
      "eyJ",
      "eyJ.x",
      good + ".extra",
      "eyJ!!.eyJ.c2ln",
      h + "." + b64url("not json") + sig,
      h + "." + b64url("[1,2]") + sig,
      h + "." + b64url(R"({"sub":"t1"})") + sig,                       // no exp
      h + "." + b64url(R"({"exp":1800000600})") + sig,                 // no sub
      h + "." + b64url(R"({"sub":7,"exp":1800000600})") + sig,         // wrong type
      h + "." + b64url(R"({"sub":"t1","exp":"soon"})") + sig,          // wrong type
      h + "." + b64url(R"({"sub":"t1","exp":1,"hosts":"x"})") + sig,   // not a list
      h + "." + b64url(R"({"sub":"t1","exp":1,"limits":[1]})") + sig,  // not an object
      h + "." + b64url(R"({"sub":"t1","exp":1,"limits":{"idle_timeout":1}})") + sig,
      h + "." + b64url(R"({"sub":"t1","exp":1,"limits":{"max_connections":0}})") + sig,
      h + "." + b64url(R"({"sub":"t1","exp":1,"limits":{"max_connections":-3}})") + sig,
      h + "." + b64url(R"({"sub":"t1","exp":1,"limits":{"max_tunnels":1.5}})") + sig,
      h + "." + b64url(R"({"sub":"t1","exp":1,"limits":{"max_tunnels":5000000000}})") + sig,
      h + "." + b64url(R"({"sub":"t1","exp":1,"limits":{"new_connections_per_second":0}})") + sig,
      b64url(R"({"alg":"HS256","alg":"none","kid":"h1"})") + "." + b64url(claims()) + sig,
      h + "." + b64url(std::string(20000, '[')) + sig,  // too long, and a nesting bomb
      h + "." + b64url(std::string(200, '[') + std::string(200, ']')) + sig,
  };
  for (const auto& t : bad) {
    SCOPED_TRACE(t.substr(0, 60));
    auto c = v->verify(t, kNow);
    EXPECT_EQ(c.reason, token_reason::kMalformed) << c.detail;
    EXPECT_EQ(c.detail.find(t.empty() ? "\x01" : t), std::string::npos);  // never quoted
  }
  // A claim written twice, properly signed: two readers could see two different tasks.
  auto dup =
      mintToken(Algorithm::kHS256, "h1", kHsKey, R"({"sub":"t1","sub":"admin","exp":1800000600})");
  ASSERT_TRUE(dup.ok());
  EXPECT_EQ(v->verify(dup.value(), kNow).reason, token_reason::kMalformed);
}

TEST_F(TaskTokenTest, KeyFilesAreChecked) {
  writeFile(dir.file("short.key"), "too-short");
  tokens.keys = {key("h1", Algorithm::kHS256, "short.key")};
  auto v = TokenVerifier::load(tokens, "test.yaml");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.errorText().find("at least 32 bytes"), std::string::npos) << v.errorText();
  tokens.keys = {key("e1", Algorithm::kEdDSA, "es.pub")};  // a P-256 key for EdDSA
  v = TokenVerifier::load(tokens, "test.yaml");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.errorText().find("not an Ed25519 key"), std::string::npos) << v.errorText();
  tokens.keys = {key("s1", Algorithm::kES256, "missing.pub")};
  v = TokenVerifier::load(tokens, "test.yaml");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.errorText().find("cannot read"), std::string::npos) << v.errorText();
}

TEST_F(TaskTokenTest, ClaimsForAndDescribe) {
  TokenRequest r;
  r.task = "t1";
  r.policy = "p";
  r.ttlSeconds = 7200;
  r.hosts = {"a.test", "b.test"};
  r.src = "10.1.2.3";
  r.limits.maxConnections = 3;
  r.limits.newConnectionsPerSecond = 0.5;
  auto o = boost::json::parse(claimsFor(r, kNow)).as_object();
  EXPECT_EQ(o["sub"].as_string(), "t1");
  EXPECT_EQ(o["exp"].as_int64(), kNow + 7200);
  EXPECT_EQ(o["iat"].as_int64(), kNow);
  EXPECT_EQ(o["jti"].as_string().size(), 32u);
  EXPECT_EQ(o["hosts"].as_array().size(), 2u);
  EXPECT_NE(claimsFor(r, kNow), claimsFor(r, kNow));  // a new jti each time
  auto v = verifier();
  ASSERT_TRUE(v);
  auto c = v->verify(mint(claimsFor(r, kNow)), kNow);
  ASSERT_TRUE(c.ok()) << c.detail;
  EXPECT_NE(describeClaims(c.claims).find("\"sub\":\"t1\""), std::string::npos);
  // The limits claim round-trips: the ones set, and no other.
  ASSERT_TRUE(c.claims.limits);
  EXPECT_EQ(c.claims.limits->maxConnections, 3u);
  EXPECT_EQ(c.claims.limits->maxTunnels, std::nullopt);
  EXPECT_EQ(c.claims.limits->newConnectionsPerSecond, 0.5);
  EXPECT_NE(describeClaims(c.claims).find(R"("limits":{"max_connections":3,)"), std::string::npos)
      << describeClaims(c.claims);
  r.limits = {};
  EXPECT_FALSE(boost::json::parse(claimsFor(r, kNow)).as_object().contains("limits"));
}

// ---- Token hygiene (issue #38, item 6) --------------------------------------------------------

// A token signed with the HS256 test key over a header written by hand (mintToken writes its
// own header, without `crit`).
std::string signedWithHeader(const std::string& header, const std::string& claimsJson) {
  const std::string input = b64url(header) + "." + b64url(claimsJson);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), kHsKey.data(), static_cast<int>(kHsKey.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &len);
  return input + "." + b64url(std::string(reinterpret_cast<const char*>(mac), len));
}

TEST_F(TaskTokenTest, AbsurdTimesAreRefusedNotWrappedAround) {
  auto v = verifier();
  ASSERT_TRUE(v);
  // iat = -2^63 + 1: exp - iat overflowed to a negative lifetime, under any max_ttl, so the
  // token was accepted (and with exp far ahead never expired).
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"iat_near_int64_min",
       fmt::format(R"({{"sub":"t1","iat":-9223372036854775807,"exp":{}}})", kNow + 600)},
      {"iat_near_int64_min_exp_far",
       R"({"sub":"t1","iat":-9223372036854775807,"exp":9223372036854775807})"},
      {"negative_iat", fmt::format(R"({{"sub":"t1","iat":-1,"exp":{}}})", kNow + 600)},
      {"negative_nbf", fmt::format(R"({{"sub":"t1","nbf":-5,"exp":{}}})", kNow + 600)},
      {"exp_past_9999", R"({"sub":"t1","exp":253402300800})"},
      {"exp_a_huge_double", R"({"sub":"t1","exp":8.9e18})"},
  };
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    auto check = v->verify(mint(c), kNow);
    EXPECT_EQ(check.reason, token_reason::kMalformed) << check.detail;
  }
  // A ttl as large as an int64 wraps no more: the minted exp is past 9999, and refused.
  TokenRequest r;
  r.task = "t1";
  r.ttlSeconds = INT64_MAX;
  EXPECT_EQ(v->verify(mint(claimsFor(r, kNow)), kNow).reason, token_reason::kMalformed);
}

TEST_F(TaskTokenTest, CriticalHeadersAreRefused) {
  auto v = verifier();
  ASSERT_TRUE(v);
  const std::string ok = signedWithHeader(R"({"alg":"HS256","kid":"h1"})", claims());
  ASSERT_TRUE(v->verify(ok, kNow).ok());  // the helper signs as mintToken does
  for (const char* header : {R"({"alg":"HS256","kid":"h1","crit":["exp"]})",
                             R"({"alg":"HS256","kid":"h1","crit":["b64"],"b64":false})",
                             R"({"alg":"HS256","kid":"h1","crit":[]})"}) {
    SCOPED_TRACE(header);
    auto c = v->verify(signedWithHeader(header, claims()), kNow);
    EXPECT_EQ(c.reason, token_reason::kMalformed) << c.detail;
  }
}

TEST_F(TaskTokenTest, NonCanonicalBase64IsRefused) {
  auto v = verifier();
  ASSERT_TRUE(v);
  const std::string t = mint(claims());
  ASSERT_TRUE(v->verify(t, kNow).ok());
  // The last character of a part carries unused low bits (a 32-byte MAC: 43 characters, 2 bits
  // unused): setting one decodes to the same bytes, another spelling of the same token.
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  auto respell = [&](std::string token, size_t at) {
    const size_t value = kAlphabet.find(token[at]);
    token[at] = kAlphabet[value ^ 1];
    return token;
  };
  const std::string sigSpelled = respell(t, t.size() - 1);
  ASSERT_EQ(base64UrlDecode(sigSpelled.substr(sigSpelled.rfind('.') + 1)),
            base64UrlDecode(t.substr(t.rfind('.') + 1)));  // the same MAC bytes
  EXPECT_EQ(v->verify(sigSpelled, kNow).reason, token_reason::kMalformed);
  // The header and claims parts too, when their length leaves unused bits.
  const size_t a = t.find('.'), b = t.rfind('.');
  if ((b - a - 1) % 4 != 0) {
    const std::string claimsSpelled = respell(t, b - 1);
    EXPECT_EQ(v->verify(claimsSpelled, kNow).reason, token_reason::kMalformed);
  }
  if (a % 4 != 0) {
    EXPECT_EQ(v->verify(respell(t, a - 1), kNow).reason, token_reason::kMalformed);
  }
}

TEST_F(TaskTokenTest, AudienceAndIssuerWhenConfigured) {
  auto loose = verifier();
  ASSERT_TRUE(loose);
  // Without tokens.audience / issuer both claims are ignored.
  EXPECT_TRUE(
      loose->verify(mint(claims(kNow + 600, R"(,"aud":"elsewhere","iss":"x")")), kNow).ok());
  tokens.audience = "sandgate-prod";
  tokens.issuer = "orchestrator";
  auto v = verifier();
  ASSERT_TRUE(v);
  const std::string iss = R"(,"iss":"orchestrator")";
  struct Case {
    const char* name;
    std::string extra;
    std::string_view reason;
  };
  const std::vector<Case> cases = {
      {"aud_string", R"(,"aud":"sandgate-prod")" + iss, {}},
      {"aud_list", R"(,"aud":["other","sandgate-prod"])" + iss, {}},
      {"no_aud", iss, token_reason::kWrongAudience},
      {"another_aud", R"(,"aud":"sandgate-staging")" + iss, token_reason::kWrongAudience},
      {"aud_list_without_it", R"(,"aud":["a","b"])" + iss, token_reason::kWrongAudience},
      {"aud_case", R"(,"aud":"Sandgate-Prod")" + iss, token_reason::kWrongAudience},
      {"aud_a_number", R"(,"aud":7)" + iss, token_reason::kMalformed},
      {"aud_list_of_numbers", R"(,"aud":[7])" + iss, token_reason::kMalformed},
      {"no_iss", R"(,"aud":"sandgate-prod")", token_reason::kWrongIssuer},
      {"another_iss", R"(,"aud":"sandgate-prod","iss":"someone")", token_reason::kWrongIssuer},
      {"iss_a_number", R"(,"aud":"sandgate-prod","iss":1)", token_reason::kMalformed},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto check = v->verify(mint(claims(kNow + 600, c.extra)), kNow);
    EXPECT_EQ(check.reason, c.reason) << check.detail;
  }
}

// Decided: an ES256 signature is accepted with a high S as with a low one (RFC 7518 does not
// require low S, and common signers do not normalise); one token then has two valid
// signatures, and nothing keys a decision on those bytes. Both spellings verify; any other
// change of S does not.
TEST_F(TaskTokenTest, Es256HighSIsAcceptedAndNothingElse) {
  auto v = verifier();
  ASSERT_TRUE(v);
  const std::string t = mint(claims(), "s1", Algorithm::kES256);
  const size_t dot = t.rfind('.');
  auto sig = base64UrlDecode(t.substr(dot + 1));
  ASSERT_TRUE(sig && sig->size() == 64);
  EC_GROUP* group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
  BIGNUM* s = BN_bin2bn(reinterpret_cast<const unsigned char*>(sig->data()) + 32, 32, nullptr);
  BIGNUM* flipped = BN_new();
  ASSERT_EQ(BN_sub(flipped, EC_GROUP_get0_order(group), s), 1);
  std::string other = *sig;
  ASSERT_EQ(BN_bn2binpad(flipped, reinterpret_cast<unsigned char*>(other.data()) + 32, 32), 32);
  BN_free(s);
  BN_free(flipped);
  EC_GROUP_free(group);
  EXPECT_TRUE(v->verify(t.substr(0, dot + 1) + b64url(other), kNow).ok());
  other[63] = static_cast<char>(other[63] ^ 1);
  EXPECT_EQ(v->verify(t.substr(0, dot + 1) + b64url(other), kNow).reason,
            token_reason::kBadSignature);
}

}  // namespace
}  // namespace sandgate::proxy
