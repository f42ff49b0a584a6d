// Task tokens: decoding, verification and minting of JWTs (see task_token.h). OpenSSL does
// every signature and MAC; Boost.JSON reads the header and the claims.
#include "proxy/identity/task_token.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <fstream>
#include <set>
#include <sstream>

#include "broker/secret.h"
#include "common/encoding.h"
#include "proxy/identity/proxy_auth.h"

namespace sandgate::proxy {

// A Basic value must have room for the longest token, and then some (proxy_auth.h).
static_assert(kMaxBasicBytes / 4 * 3 > kMaxTokenBytes + 1024);

namespace json = boost::json;
using Algorithm = config::TokenKey::Algorithm;

namespace {

// ---- JSON objects with every key once -----------------------------------------------------

// A SAX handler that only looks for a key written twice in one object (Boost.JSON's DOM keeps
// one of them silently, and two readers of the same token must never see different claims).
struct DuplicateKeyCheck {
  static constexpr std::size_t max_object_size = 256;
  static constexpr std::size_t max_array_size = 256;
  static constexpr std::size_t max_key_size = 256;
  static constexpr std::size_t max_string_size = kMaxTokenBytes;

  std::vector<std::set<std::string>> open;  // the keys seen in each open object
  std::vector<bool> isObject;               // each open container: object or array
  std::string key;
  bool duplicate = false;

  bool on_document_begin(boost::system::error_code&) { return true; }
  bool on_document_end(boost::system::error_code&) { return true; }
  bool on_object_begin(boost::system::error_code&) {
    open.emplace_back();
    isObject.push_back(true);
    return true;
  }
  bool on_object_end(std::size_t, boost::system::error_code&) {
    open.pop_back();
    isObject.pop_back();
    return true;
  }
  bool on_array_begin(boost::system::error_code&) {
    isObject.push_back(false);
    return true;
  }
  bool on_array_end(std::size_t, boost::system::error_code&) {
    isObject.pop_back();
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, boost::system::error_code&) {
    key.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, boost::system::error_code&) {
    key.append(s.data(), s.size());
    if (!open.back().insert(key).second) duplicate = true;
    key.clear();
    return true;
  }
  bool on_string_part(json::string_view, std::size_t, boost::system::error_code&) { return true; }
  bool on_string(json::string_view, std::size_t, boost::system::error_code&) { return true; }
  bool on_number_part(json::string_view, boost::system::error_code&) { return true; }
  bool on_int64(std::int64_t, json::string_view, boost::system::error_code&) { return true; }
  bool on_uint64(std::uint64_t, json::string_view, boost::system::error_code&) { return true; }
  bool on_double(double, json::string_view, boost::system::error_code&) { return true; }
  bool on_bool(bool, boost::system::error_code&) { return true; }
  bool on_null(boost::system::error_code&) { return true; }
  bool on_comment_part(json::string_view, boost::system::error_code&) { return true; }
  bool on_comment(json::string_view, boost::system::error_code&) { return true; }
};

// The JSON object in `text`, or why not.
std::optional<json::object> parseObject(std::string_view text, std::string* why) {
  json::parse_options opt;
  opt.max_depth = 8;
  json::basic_parser<DuplicateKeyCheck> sax(opt);
  boost::system::error_code ec;
  sax.write_some(false, text.data(), text.size(), ec);
  if (ec) {
    *why = "is not JSON";
    return std::nullopt;
  }
  if (sax.handler().duplicate) {
    *why = "has a key written twice";
    return std::nullopt;
  }
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec, {}, opt);
  if (ec || !v.is_object()) {
    *why = "is not a JSON object";
    return std::nullopt;
  }
  return std::move(v.as_object());
}

std::optional<int64_t> numberClaim(const json::object& o, std::string_view name, bool* bad) {
  const json::value* v = o.if_contains(name);
  if (!v) return std::nullopt;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64() && v->as_uint64() <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(v->as_uint64());
  }
  if (v->is_double() && v->as_double() >= 0 && v->as_double() < 9.0e18) {
    return static_cast<int64_t>(v->as_double());
  }
  *bad = true;
  return std::nullopt;
}

std::optional<std::string> stringClaim(const json::object& o, std::string_view name, bool* bad) {
  const json::value* v = o.if_contains(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    *bad = true;
    return std::nullopt;
  }
  return std::string(v->as_string());
}

TokenCheck malformed(std::string detail) {
  TokenCheck c;
  c.reason = token_reason::kMalformed;
  c.detail = std::move(detail);
  return c;
}

// The three parts of a compact JWS, each as written.
struct Parts {
  std::string_view header, claims, signature;
};

std::optional<Parts> split(std::string_view token) {
  const size_t a = token.find('.');
  if (a == std::string_view::npos) return std::nullopt;
  const size_t b = token.find('.', a + 1);
  if (b == std::string_view::npos || token.find('.', b + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  return Parts{token.substr(0, a), token.substr(a + 1, b - a - 1), token.substr(b + 1)};
}

}  // namespace

std::optional<std::string> readKeyFile(const std::string& path, std::string* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = fmt::format("cannot read {}", path);
    return std::nullopt;
  }
  std::string bytes;
  char buf[4096];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    bytes.append(buf, static_cast<size_t>(in.gcount()));
    if (bytes.size() > 64 * 1024) {
      broker::wipe(bytes);
      *why = fmt::format("{} is larger than 64 KiB: not a key", path);
      return std::nullopt;
    }
  }
  return bytes;
}

std::optional<TokenLimits> parseTokenLimits(const json::value& v, std::string* why) {
  if (!v.is_object()) {
    *why = "is not an object";
    return std::nullopt;
  }
  TokenLimits out;
  for (const auto& [key, value] : v.as_object()) {
    const bool count = key == "max_connections" || key == "max_tunnels";
    if (!count && key != "new_connections_per_second") {
      *why =
          "name a limit a token cannot lower (it may lower max_connections, max_tunnels, "
          "new_connections_per_second)";
      return std::nullopt;
    }
    if (count) {
      if (!value.is_int64() && !value.is_uint64()) {
        *why = fmt::format("{} is not a whole number", std::string_view(key));
        return std::nullopt;
      }
      const uint64_t n = value.is_uint64()      ? value.as_uint64()
                         : value.as_int64() < 0 ? 0
                                                : static_cast<uint64_t>(value.as_int64());
      if (n == 0 || n > UINT32_MAX) {
        *why = fmt::format("{} must be from 1 to {}", std::string_view(key), UINT32_MAX);
        return std::nullopt;
      }
      (key == "max_connections" ? out.maxConnections : out.maxTunnels) = static_cast<uint32_t>(n);
    } else {
      if (!value.is_number() || value.to_number<double>() <= 0) {
        *why = "new_connections_per_second must be a number above 0";
        return std::nullopt;
      }
      out.newConnectionsPerSecond = value.to_number<double>();
    }
  }
  return out;
}

namespace {

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

}  // namespace

struct TokenVerifier::Key {
  std::string id;
  Algorithm algorithm;
  std::shared_ptr<const broker::Secret> secret;  // HS256
  PkeyPtr pkey{nullptr, &EVP_PKEY_free};         // EdDSA, ES256
  std::optional<int64_t> revokedBefore;

  bool verify(std::string_view signingInput, std::string_view sig) const {
    switch (algorithm) {
      case Algorithm::kHS256: {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        // reveal(): the shared key goes only into OpenSSL's HMAC.
        const std::string_view k = secret->reveal();
        if (!HMAC(EVP_sha256(), k.data(), static_cast<int>(k.size()),
                  reinterpret_cast<const unsigned char*>(signingInput.data()), signingInput.size(),
                  mac, &len)) {
          return false;
        }
        return sig.size() == len && CRYPTO_memcmp(mac, sig.data(), len) == 0;
      }
      case Algorithm::kEdDSA:
        return digestVerify(nullptr, signingInput, sig);
      case Algorithm::kES256: {
        // JWS writes r || s, 32 bytes each (RFC 7518, 3.4); OpenSSL verifies DER.
        if (sig.size() != 64) return false;
        const auto* raw = reinterpret_cast<const unsigned char*>(sig.data());
        ECDSA_SIG* es = ECDSA_SIG_new();
        BIGNUM* r = BN_bin2bn(raw, 32, nullptr);
        BIGNUM* s = BN_bin2bn(raw + 32, 32, nullptr);
        if (!es || !r || !s || ECDSA_SIG_set0(es, r, s) != 1) {
          BN_free(r);
          BN_free(s);
          ECDSA_SIG_free(es);
          return false;
        }
        unsigned char* der = nullptr;
        const int derLen = i2d_ECDSA_SIG(es, &der);
        ECDSA_SIG_free(es);
        if (derLen <= 0) return false;
        const bool ok = digestVerify(
            EVP_sha256(), signingInput,
            std::string_view(reinterpret_cast<const char*>(der), static_cast<size_t>(derLen)));
        OPENSSL_free(der);
        return ok;
      }
    }
    return false;
  }

  bool digestVerify(const EVP_MD* md, std::string_view msg, std::string_view sig) const {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    if (!ctx) return false;
    const bool ok =
        EVP_DigestVerifyInit(ctx, nullptr, md, nullptr, pkey.get()) == 1 &&
        EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                         reinterpret_cast<const unsigned char*>(msg.data()), msg.size()) == 1;
    EVP_MD_CTX_free(ctx);
    return ok;
  }
};

TokenVerifier::~TokenVerifier() = default;

bool looksLikeJwt(std::string_view password) {
  auto parts = split(password);
  // A JSON header starts with '{', which base64url writes as "ey".
  return parts && parts->header.starts_with("ey") && !parts->claims.empty();
}

TokenCheck decodeToken(std::string_view token) {
  if (token.size() > kMaxTokenBytes) {
    return malformed(fmt::format("the token is longer than {} bytes", kMaxTokenBytes));
  }
  auto parts = split(token);
  if (!parts) return malformed("a token is three base64url parts joined by '.'");
  auto headerText = base64UrlDecode(parts->header);
  auto claimsText = base64UrlDecode(parts->claims);
  auto signature = base64UrlDecode(parts->signature);
  if (!headerText || !claimsText || !signature) {
    return malformed("a part of the token is not base64url");
  }
  // One spelling per token: a part whose last character has unused bits set decodes to the
  // same bytes as the canonical one, so the "same" token would have many strings (and many
  // remembered hashes). Encoding again must give back what was sent.
  if (base64UrlEncode(*headerText) != parts->header ||
      base64UrlEncode(*claimsText) != parts->claims ||
      base64UrlEncode(*signature) != parts->signature) {
    return malformed("a part of the token is not canonical base64url (unused bits set)");
  }
  std::string why;
  auto header = parseObject(*headerText, &why);
  if (!header) return malformed("the token's header " + why);
  auto claims = parseObject(*claimsText, &why);
  if (!claims) return malformed("the token's claims " + why);
  // RFC 7515, 4.1.11: a recipient must refuse a token whose `crit` lists an extension it does
  // not understand, and sandgate understands none.
  if (header->contains("crit")) {
    return malformed("the token's header has `crit`: sandgate supports no critical extension");
  }

  TokenCheck out;
  TokenClaims& c = out.claims;
  bool bad = false;
  c.alg = stringClaim(*header, "alg", &bad).value_or("");
  c.kid = stringClaim(*header, "kid", &bad).value_or("");
  if (bad) return malformed("the token's header has an alg or kid that is not a string");
  auto sub = stringClaim(*claims, "sub", &bad);
  c.policy = stringClaim(*claims, "pol", &bad);
  c.jti = stringClaim(*claims, "jti", &bad);
  c.src = stringClaim(*claims, "src", &bad);
  auto exp = numberClaim(*claims, "exp", &bad);
  c.iat = numberClaim(*claims, "iat", &bad);
  c.nbf = numberClaim(*claims, "nbf", &bad);
  if (const json::value* h = claims->if_contains("hosts")) {
    if (!h->is_array()) {
      bad = true;
    } else {
      c.hosts.emplace();
      for (const auto& v : h->as_array()) {
        if (!v.is_string()) {
          bad = true;
          break;
        }
        c.hosts->emplace_back(v.as_string());
      }
    }
  }
  if (const json::value* l = claims->if_contains("limits")) {
    std::string why;
    c.limits = parseTokenLimits(*l, &why);
    if (!c.limits) return malformed("the token's limits " + why);
  }
  if (const json::value* b = claims->if_contains("budgets")) {
    std::string why;
    c.budgets = parseTokenBudgets(*b, &why);
    if (!c.budgets) return malformed("the token's budgets " + why);
  }
  c.issuer = stringClaim(*claims, "iss", &bad);
  if (const json::value* a = claims->if_contains("aud")) {
    c.audience.emplace();
    if (a->is_string()) {
      c.audience->emplace_back(a->as_string());
    } else if (a->is_array()) {
      for (const auto& v : a->as_array()) {
        if (!v.is_string()) {
          bad = true;
          break;
        }
        c.audience->emplace_back(v.as_string());
      }
    } else {
      bad = true;
    }
  }
  if (bad) return malformed("a claim of the token has the wrong type");
  if (!sub || sub->empty()) return malformed("the token has no `sub` (the task)");
  if (!exp) return malformed("the token has no `exp`: every task token expires");
  // Times far outside any clock would overflow exp - iat (iat = -2^63 + 1 made a token that
  // never expired): they are refused, and every sum below stays in range.
  for (const auto& [name, when] :
       {std::pair{"exp", exp}, std::pair{"iat", c.iat}, std::pair{"nbf", c.nbf}}) {
    if (when && (*when < 0 || *when > kMaxTokenTime)) {
      return malformed(fmt::format("the token's {} is not a time from 1970 to 9999", name));
    }
  }
  c.task = std::move(*sub);
  c.exp = *exp;
  return out;
}

Result<std::shared_ptr<const TokenVerifier>> TokenVerifier::load(const config::Tokens& tokens,
                                                                 const std::string& configFile) {
  std::shared_ptr<TokenVerifier> v(new TokenVerifier());
  Diagnostics errors;
  for (size_t i = 0; i < tokens.keys.size(); ++i) {
    const auto& k = tokens.keys[i];
    auto fail = [&](std::string message) {
      errors.push_back({configFile, k.mark.line, k.mark.col, fmt::format("tokens.keys[{}].file", i),
                        std::move(message)});
    };
    std::string why;
    auto bytes = readKeyFile(k.file, &why);
    if (!bytes) {
      fail(why);
      continue;
    }
    auto key = std::make_unique<Key>();
    key->id = k.id;
    key->algorithm = k.algorithm;
    key->revokedBefore = k.revokedBefore;
    if (k.algorithm == Algorithm::kHS256) {
      broker::trimTrailingNewline(*bytes);
      if (bytes->size() < 32) {
        broker::wipe(*bytes);
        fail(fmt::format("{}: an HS256 key must be at least 32 bytes (RFC 7518, 3.2)", k.file));
        continue;
      }
      key->secret = broker::Secret::take(*bytes);
    } else {
      BIO* bio = BIO_new_mem_buf(bytes->data(), static_cast<int>(bytes->size()));
      EVP_PKEY* pkey = bio ? PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr) : nullptr;
      BIO_free(bio);
      if (!pkey) {
        fail(fmt::format("{}: not a PEM public key (\"-----BEGIN PUBLIC KEY-----\")", k.file));
        continue;
      }
      key->pkey.reset(pkey);
      const bool fits = k.algorithm == Algorithm::kEdDSA
                            ? EVP_PKEY_is_a(pkey, "ED25519") == 1
                            : EVP_PKEY_is_a(pkey, "EC") == 1 && EVP_PKEY_get_bits(pkey) == 256;
      if (!fits) {
        fail(fmt::format("{}: not {} key", k.file,
                         k.algorithm == Algorithm::kEdDSA ? "an Ed25519" : "a P-256 (ES256)"));
        continue;
      }
    }
    v->keys_.push_back(std::move(key));
  }
  if (!errors.empty()) return errors;
  v->revoked_ = tokens.revoked;
  std::sort(v->revoked_.begin(), v->revoked_.end());
  // Bounded like token times, so that exp + leeway and max_ttl + leeway cannot overflow.
  v->maxTtl_ = std::min<int64_t>(static_cast<int64_t>(tokens.maxTtl.count()), kMaxTokenTime);
  v->leeway_ = std::min<int64_t>(static_cast<int64_t>(tokens.leeway.count()), kMaxTokenTime);
  v->audience_ = tokens.audience;
  v->issuer_ = tokens.issuer;
  return std::shared_ptr<const TokenVerifier>(std::move(v));
}

TokenCheck TokenVerifier::verify(std::string_view token, int64_t now) const {
  if (token.size() > kMaxTokenBytes) return decodeToken(token);
  // A sandbox opens many connections with one token: its signature is checked on the first
  // and remembered by the token's SHA-256; the times and revocation are checked every time.
  std::array<unsigned char, 32> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest.data());
  const std::string hash(reinterpret_cast<const char*>(digest.data()), digest.size());
  {
    std::lock_guard lock(cacheMu_);
    if (auto it = verified_.find(hash); it != verified_.end()) {
      TokenCheck out;
      out.claims = it->second.claims;
      return checkClaims(std::move(out), *it->second.key, now);
    }
  }
  TokenCheck out = signedClaims(token);
  if (!out.ok()) return out;
  const Key* key = nullptr;
  for (const auto& k : keys_) {
    if (k->id == out.claims.kid) key = k.get();
  }
  {
    std::lock_guard lock(cacheMu_);
    if (verified_.size() >= kMaxVerifiedTokens) verified_.clear();  // bounded, simply
    verified_.emplace(hash, Verified{out.claims, key});
  }
  return checkClaims(std::move(out), *key, now);
}

TokenCheck TokenVerifier::signedClaims(std::string_view token) const {
  TokenCheck out = decodeToken(token);
  if (!out.ok()) return out;
  const TokenClaims& c = out.claims;
  auto refuse = [&](std::string_view reason, std::string detail) {
    out.reason = reason;
    out.detail = std::move(detail);
    return out;
  };
  const Key* key = nullptr;
  for (const auto& k : keys_) {
    if (k->id == c.kid) key = k.get();
  }
  if (!key) {
    return refuse(token_reason::kUnknownKey,
                  c.kid.empty() ? "the token names no key (`kid`)"
                                : fmt::format("no key `{}` is configured (tokens.keys)",
                                              c.kid.substr(0, 64)));
  }
  const std::string_view want = config::algorithmName(key->algorithm);
  if (c.alg != want) {
    return refuse(token_reason::kWrongAlgorithm,
                  fmt::format("key `{}` signs with {}; the token says `{}`", key->id, want,
                              c.alg.substr(0, 16)));
  }
  auto parts = split(token);
  auto sig = base64UrlDecode(parts->signature);
  const std::string_view signingInput =
      token.substr(0, parts->header.size() + 1 + parts->claims.size());
  if (!sig || !key->verify(signingInput, *sig)) {
    return refuse(token_reason::kBadSignature,
                  fmt::format("the token's signature does not verify with key `{}`", key->id));
  }
  return out;
}

TokenCheck TokenVerifier::checkClaims(TokenCheck out, const Key& keyRef, int64_t now) const {
  const TokenClaims& c = out.claims;
  const Key* key = &keyRef;
  auto refuse = [&](std::string_view reason, std::string detail) {
    out.reason = reason;
    out.detail = std::move(detail);
    return out;
  };
  if (now > c.exp + leeway_) {
    return refuse(token_reason::kExpired, fmt::format("the token expired {} s ago", now - c.exp));
  }
  for (const auto& [name, when] : {std::pair{"nbf", c.nbf}, std::pair{"iat", c.iat}}) {
    if (when && *when > now + leeway_) {
      return refuse(
          token_reason::kNotYetValid,
          fmt::format("the token's {} is {} s ahead of this replica's clock", name, *when - now));
    }
  }
  const int64_t from = c.iat.value_or(now);
  if (c.exp - from > maxTtl_ + leeway_) {
    return refuse(token_reason::kTtlTooLong,
                  fmt::format("the token lives {} s, more than tokens.max_ttl ({} s)", c.exp - from,
                              maxTtl_));
  }
  if (c.jti && std::binary_search(revoked_.begin(), revoked_.end(), *c.jti)) {
    return refuse(token_reason::kRevoked, "the token's jti is in tokens.revoked");
  }
  if (c.jti) {
    std::lock_guard lock(revokedMu_);
    if (revokedLater_.count(*c.jti)) {
      return refuse(token_reason::kRevoked,
                    "the token's jti was revoked through the admin API (POST /v1/revoke)");
    }
  }
  if (key->revokedBefore && (!c.iat || *c.iat < *key->revokedBefore)) {
    return refuse(token_reason::kRevoked,
                  fmt::format("key `{}` refuses tokens issued before its revoked_before", key->id));
  }
  if (audience_ && (!c.audience || std::find(c.audience->begin(), c.audience->end(), *audience_) ==
                                       c.audience->end())) {
    return refuse(token_reason::kWrongAudience,
                  fmt::format("the token's aud does not name `{}` (tokens.audience)", *audience_));
  }
  if (issuer_ && c.issuer != issuer_) {
    return refuse(token_reason::kWrongIssuer,
                  fmt::format("the token's iss is not `{}` (tokens.issuer)", *issuer_));
  }
  return out;
}

bool TokenVerifier::revoke(std::string jti) const {
  std::lock_guard lock(revokedMu_);
  if (revokedLater_.size() >= kMaxRevokedLater && !revokedLater_.count(jti)) return false;
  revokedLater_.insert(std::move(jti));
  revocations_.fetch_add(1, std::memory_order_release);
  return true;
}

}  // namespace sandgate::proxy
