// Minting task tokens and describing their claims (see task_token.h): what `sandgate token
// issue` and the admin API's POST /v1/tokens sign. OpenSSL does every signature and MAC.
#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include <boost/json.hpp>
#include <memory>

#include "common/encoding.h"
#include "proxy/identity/task_token.h"

namespace sandgate::proxy {

namespace json = boost::json;
using Algorithm = config::TokenKey::Algorithm;

namespace {

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

json::object limitsJson(const TokenLimits& l) {
  json::object o;
  if (l.maxConnections) o["max_connections"] = *l.maxConnections;
  if (l.maxTunnels) o["max_tunnels"] = *l.maxTunnels;
  if (l.newConnectionsPerSecond) o["new_connections_per_second"] = *l.newConnectionsPerSecond;
  return o;
}

}  // namespace

std::string claimsFor(const TokenRequest& request, int64_t now) {
  json::object o;
  o["sub"] = request.task;
  if (request.policy) o["pol"] = *request.policy;
  o["iat"] = now;
  o["nbf"] = now;
  // Checked: a ttl as large as an int64 (POST /v1/tokens takes any) must not wrap around to
  // the past; past kMaxTokenTime the verifier refuses the claim (token_malformed).
  int64_t exp = 0;
  if (__builtin_add_overflow(now, request.ttlSeconds, &exp) || exp > kMaxTokenTime) {
    exp = kMaxTokenTime + 1;
  }
  o["exp"] = exp;
  if (request.jti) {
    o["jti"] = *request.jti;
  } else {
    unsigned char raw[16];
    if (RAND_bytes(raw, sizeof(raw)) == 1) {
      o["jti"] = fmt::format("{:02x}", fmt::join(raw, raw + sizeof(raw), ""));
    }
  }
  if (!request.hosts.empty()) {
    json::array hosts;
    for (const auto& h : request.hosts) hosts.emplace_back(h);
    o["hosts"] = std::move(hosts);
  }
  if (request.src) o["src"] = *request.src;
  if (request.audience) o["aud"] = *request.audience;
  if (request.issuer) o["iss"] = *request.issuer;
  json::object limits = limitsJson(request.limits);
  if (!limits.empty()) o["limits"] = std::move(limits);
  return json::serialize(o);
}

std::string describeClaims(const TokenClaims& c) {
  json::object o;
  o["kid"] = c.kid;
  o["alg"] = c.alg;
  o["sub"] = c.task;
  if (c.policy) o["pol"] = *c.policy;
  if (c.jti) o["jti"] = *c.jti;
  o["exp"] = c.exp;
  if (c.iat) o["iat"] = *c.iat;
  if (c.nbf) o["nbf"] = *c.nbf;
  if (c.hosts) {
    json::array hosts;
    for (const auto& h : *c.hosts) hosts.emplace_back(h);
    o["hosts"] = std::move(hosts);
  }
  if (c.src) o["src"] = *c.src;
  if (c.limits) o["limits"] = limitsJson(*c.limits);
  if (c.budgets) o["budgets"] = budgetsJson(*c.budgets);
  if (c.audience) {
    json::array aud;
    for (const auto& a : *c.audience) aud.emplace_back(a);
    o["aud"] = std::move(aud);
  }
  if (c.issuer) o["iss"] = *c.issuer;
  return json::serialize(o);
}

Result<std::string> mintToken(Algorithm alg, std::string_view kid, std::string_view key,
                              std::string_view claimsJson) {
  auto fail = [](std::string m) { return Diagnostic{"", 0, 0, "", std::move(m)}; };
  json::object header;
  header["alg"] = config::algorithmName(alg);
  header["typ"] = "JWT";
  header["kid"] = kid;
  const std::string input =
      base64UrlEncode(json::serialize(header)) + "." + base64UrlEncode(claimsJson);
  const auto* msg = reinterpret_cast<const unsigned char*>(input.data());
  std::string sig;
  if (alg == Algorithm::kHS256) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (key.size() < 32) return fail("an HS256 key must be at least 32 bytes");
    if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg, input.size(), mac,
              &len)) {
      return fail("HMAC failed");
    }
    sig.assign(reinterpret_cast<const char*>(mac), len);
  } else {
    BIO* bio = BIO_new_mem_buf(key.data(), static_cast<int>(key.size()));
    PkeyPtr pkey(bio ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr) : nullptr,
                 &EVP_PKEY_free);
    BIO_free(bio);
    if (!pkey) return fail("not a PEM private key");
    const bool fits = alg == Algorithm::kEdDSA ? EVP_PKEY_is_a(pkey.get(), "ED25519") == 1
                                               : EVP_PKEY_is_a(pkey.get(), "EC") == 1 &&
                                                     EVP_PKEY_get_bits(pkey.get()) == 256;
    if (!fits) return fail(fmt::format("the key is not for {}", config::algorithmName(alg)));
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    size_t len = 0;
    std::string der;
    const EVP_MD* md = alg == Algorithm::kEdDSA ? nullptr : EVP_sha256();
    bool ok = ctx && EVP_DigestSignInit(ctx, nullptr, md, nullptr, pkey.get()) == 1 &&
              EVP_DigestSign(ctx, nullptr, &len, msg, input.size()) == 1;
    if (ok) {
      der.resize(len);
      ok = EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(der.data()), &len, msg,
                          input.size()) == 1;
      der.resize(len);
    }
    EVP_MD_CTX_free(ctx);
    if (!ok) return fail("signing failed");
    if (alg == Algorithm::kEdDSA) {
      sig = std::move(der);
    } else {
      // OpenSSL writes DER; JWS wants r || s, 32 bytes each.
      const auto* p = reinterpret_cast<const unsigned char*>(der.data());
      ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(der.size()));
      if (!es) return fail("signing failed");
      unsigned char raw[64];
      const bool packed = BN_bn2binpad(ECDSA_SIG_get0_r(es), raw, 32) == 32 &&
                          BN_bn2binpad(ECDSA_SIG_get0_s(es), raw + 32, 32) == 32;
      ECDSA_SIG_free(es);
      if (!packed) return fail("signing failed");
      sig.assign(reinterpret_cast<const char*>(raw), sizeof(raw));
    }
  }
  return input + "." + base64UrlEncode(sig);
}

}  // namespace sandgate::proxy
