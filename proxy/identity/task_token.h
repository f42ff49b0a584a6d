// Task tokens: JWTs (RFC 7519) that an orchestrator mints for one task and that every replica
// verifies on its own, with nothing shared but a key (`tokens:` in the config). Sent as the
// password of `Proxy-Authorization: Basic base64(task:<jwt>)`, like a static token.
//
// What a token must be, checked in this order (the first failure is the refusal's reason):
//   - three base64url parts, at most kMaxTokenBytes, each in its one canonical spelling (no
//     padding, no unused bits set), header and claims JSON objects with no duplicate key, no
//     `crit` header (RFC 7515, 4.1.11: sandgate understands no extension, so a token that
//     needs one is refused), and exp, iat and nbf times from 1970 to 9999 (token_malformed);
//   - a `kid` naming a configured key (token_unknown_key), and an `alg` equal to that key's
//     algorithm: `none` and every other algorithm are refused (token_wrong_algorithm);
//   - a signature that verifies with the key (token_bad_signature): HMAC-SHA256, Ed25519 or
//     ECDSA P-256 with SHA-256 (the JWS raw r||s form), all through OpenSSL;
//   - `sub` a task name and `exp` a number (token_malformed); exp + leeway not passed
//     (token_expired); nbf and iat not ahead of now by more than the leeway
//     (token_not_yet_valid); exp no further than max_ttl after iat (or now, without iat)
//     (token_ttl_too_long);
//   - `jti` not in `tokens.revoked`, and iat not before the key's `revoked_before`
//     (token_revoked; a key with revoked_before refuses tokens without iat);
//   - with tokens.audience, an `aud` (a string or a list) that names it (token_wrong_audience);
//     with tokens.issuer, an `iss` equal to it (token_wrong_issuer). Without them both claims
//     are ignored.
// ES256 signatures are accepted with a high or a low S (as RFC 7518 and common signers have
// them): one token may have two valid signatures, which grants nothing, since nothing keys a
// decision on the signature's bytes (revocation is by jti, a remembered token only saves work).
// What the claims allow (a configured or ad-hoc task, `pol`, `hosts` and `src` only narrow) is
// checked against the snapshot and the client by taskForToken() (token_task.h).
//
// The token is a credential: it is never logged, and no refusal quotes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "proxy/identity/token_budgets.h"

namespace boost::json {
class value;
}

namespace sandgate::broker {
class Secret;
}

namespace sandgate::proxy {

// Stable refusal reasons (407 bodies, audit lines, sandgate_requests_total).
namespace token_reason {
inline constexpr std::string_view kMalformed = "token_malformed";
inline constexpr std::string_view kUnknownKey = "token_unknown_key";
inline constexpr std::string_view kWrongAlgorithm = "token_wrong_algorithm";
inline constexpr std::string_view kBadSignature = "token_bad_signature";
inline constexpr std::string_view kExpired = "token_expired";
inline constexpr std::string_view kNotYetValid = "token_not_yet_valid";
inline constexpr std::string_view kTtlTooLong = "token_ttl_too_long";
inline constexpr std::string_view kRevoked = "token_revoked";
inline constexpr std::string_view kWrongAudience = "token_wrong_audience";
inline constexpr std::string_view kWrongIssuer = "token_wrong_issuer";
// Checked by taskForToken() (token_task.h):
inline constexpr std::string_view kUnknownTask = "token_unknown_task";
inline constexpr std::string_view kTaskMismatch = "token_task_mismatch";
inline constexpr std::string_view kUnknownPolicy = "token_unknown_policy";
inline constexpr std::string_view kWidens = "token_widens";
inline constexpr std::string_view kSourceMismatch = "token_source_mismatch";
}  // namespace token_reason

inline constexpr size_t kMaxTokenBytes = 8192;
// The latest exp, iat or nbf a token may carry (9999-12-31T23:59:59Z): with times from 0 to
// this, exp - iat and exp + leeway cannot overflow.
inline constexpr int64_t kMaxTokenTime = 253402300799;

// The `limits` claim: lower admission limits for the connections a token identifies, named as
// in the config's `limits:`. Another key, or a value that is not a positive number (an integer
// for the counts), makes the token malformed: refused rather than ignored.
struct TokenLimits {
  std::optional<uint32_t> maxConnections;         // max_connections
  std::optional<uint32_t> maxTunnels;             // max_tunnels
  std::optional<double> newConnectionsPerSecond;  // new_connections_per_second
};

struct TokenClaims {
  std::string kid;
  std::string alg;
  std::string task;                   // sub
  std::optional<std::string> policy;  // pol
  std::optional<std::string> jti;
  int64_t exp = 0;
  std::optional<int64_t> iat, nbf;
  std::optional<std::vector<std::string>> hosts;       // narrowing: only these hosts
  std::optional<std::string> src;                      // narrowing: the client address (IP or CIDR)
  std::optional<TokenLimits> limits;                   // narrowing: lower admission limits
  std::optional<std::vector<config::Budget>> budgets;  // narrowing: token_budgets.h
  std::optional<std::vector<std::string>> audience;    // aud (a string is a list of one)
  std::optional<std::string> issuer;                   // iss
};

struct TokenCheck {
  std::string_view reason;  // empty: valid
  std::string detail;       // one sentence, never the token
  TokenClaims claims;
  bool ok() const { return reason.empty(); }
};

// Does `password` have the shape of a JWT (three base64url parts)? A static token never does
// (`sandgate` tokens are hex or arbitrary, and never contain two dots with a JSON header).
bool looksLikeJwt(std::string_view password);

// The claims of `token` without checking the signature, times or revocation (`sandgate token
// inspect`); the reason is token_malformed when it cannot be read.
TokenCheck decodeToken(std::string_view token);

class TokenVerifier {
 public:
  // Loads every key file of `tokens` (paths relative to the config file's directory).
  // Errors name the key's file:line and what is wrong with its file.
  static Result<std::shared_ptr<const TokenVerifier>> load(const config::Tokens& tokens,
                                                           const std::string& configFile);
  ~TokenVerifier();

  // Checks `token` at Unix time `now` (see the top of this file). Thread-safe. A token whose
  // signature verified once is remembered (by its SHA-256, up to kMaxVerifiedTokens, for this
  // verifier's life: a reload starts afresh); its times and revocation are checked each call.
  TokenCheck verify(std::string_view token, int64_t now) const;

  // Refuses tokens with this `jti` (token_revoked) from now until a reload replaces this
  // verifier (POST /v1/revoke; tokens.revoked is what lasts). Thread-safe; at most
  // kMaxRevokedLater such jti values (false once full).
  bool revoke(std::string jti) const;
  static constexpr size_t kMaxRevokedLater = 65536;

  // tokens.leeway in seconds: a token is refused once now > exp + leeway.
  int64_t leeway() const { return leeway_; }
  // How many revoke() calls took effect: a connection that a token identified compares it to
  // know that its token must be checked again (an admin revocation makes no new snapshot).
  uint64_t revocations() const { return revocations_.load(std::memory_order_acquire); }

  struct Key;
  static constexpr size_t kMaxVerifiedTokens = 4096;

 private:
  TokenVerifier() = default;
  // Decoding, key, algorithm and signature: what a remembered token skips.
  TokenCheck signedClaims(std::string_view token) const;
  // Times, lifetime and revocation of signed claims.
  TokenCheck checkClaims(TokenCheck out, const Key& key, int64_t now) const;

  struct Verified {
    TokenClaims claims;
    const Key* key;
  };
  mutable std::mutex cacheMu_;
  mutable std::unordered_map<std::string, Verified> verified_;  // SHA-256 -> claims
  std::vector<std::unique_ptr<Key>> keys_;
  std::vector<std::string> revoked_;  // sorted
  mutable std::mutex revokedMu_;
  mutable std::set<std::string, std::less<>> revokedLater_;  // by revoke()
  mutable std::atomic<uint64_t> revocations_{0};
  int64_t maxTtl_ = 0;
  int64_t leeway_ = 0;
  std::optional<std::string> audience_, issuer_;  // tokens.audience, tokens.issuer
};

// A `limits` object as a token carries it (and as POST /v1/tokens takes it); nullopt, with
// why, for another key or a value that is not a positive number (a whole one for counts).
std::optional<TokenLimits> parseTokenLimits(const boost::json::value& v, std::string* why);

// The bytes of a key file (at most 64 KiB; the caller wipes them), or why it cannot be read.
std::optional<std::string> readKeyFile(const std::string& path, std::string* why);

// What `sandgate token issue` asks for.
struct TokenRequest {
  std::string task;
  std::optional<std::string> policy;
  int64_t ttlSeconds = 3600;
  std::vector<std::string> hosts;  // empty: no `hosts` claim
  std::optional<std::string> src;
  std::optional<std::string> jti;               // absent: 16 random bytes in hex
  TokenLimits limits;                           // none set: no `limits` claim
  std::optional<std::string> audience, issuer;  // aud, iss (a config's tokens.audience/issuer)
};

// The claims of a new token as JSON text: sub, pol, iat = now, nbf = now, exp = now + ttl, jti,
// hosts, src, limits, aud, iss.
std::string claimsFor(const TokenRequest& request, int64_t now);

// The header and claims of a decoded token as indented JSON, for people.
std::string describeClaims(const TokenClaims& claims);

// Mints a token (`sandgate token issue`, tests): the header {"alg","typ":"JWT","kid"} and
// `claims` (a JSON object text), signed with `key`: HS256 the raw shared key, EdDSA and ES256 a
// PEM private key. Errors: a key that does not load or does not match the algorithm.
Result<std::string> mintToken(config::TokenKey::Algorithm alg, std::string_view kid,
                              std::string_view key, std::string_view claimsJson);

}  // namespace sandgate::proxy
