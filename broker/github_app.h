// GitHub App installation tokens minted by sandgate (source.github_app): the App's JWT, the
// token request, the answer, and a cache that mints once however many requests wait for it.
//
// The HTTPS call itself is the proxy's (it owns sockets, upstream TLS verification and the
// config's `resolve:` overrides): broker/ only sees the ApiClient interface, so that it stays
// free of network code.
#pragma once

#include <openssl/evp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "broker/source.h"
#include "config/config.h"

namespace sandgate::broker {

// One POST to an API over verified TLS.
struct ApiRequest {
  std::string_view credential;                // whose call this is (picks its upstream_ca)
  std::string_view url;                       // https://host[:port]/path
  const Secret* bearer = nullptr;             // sent as Authorization: Bearer
  std::string_view body;                      // application/json
  std::chrono::milliseconds timeout{10'000};  // the whole exchange
};

// What came back. `error` (set when there is no HTTP answer) never quotes a secret; the body
// may hold one (a minted token): the caller wipes it.
struct ApiResponse {
  int status = 0;
  std::string body;
  std::string error;
};

class ApiClient {
 public:
  virtual ~ApiClient() = default;
  // Thread-safe. Bounded by req.timeout; a stop request ends it early with an error.
  virtual ApiResponse post(const ApiRequest& req, std::stop_token stop) const = 0;
};

// The App JWT's claims as JSON: iat backdated 60 s (GitHub's advice against clock drift), exp
// 9 minutes after now (GitHub refuses more than 10), iss the App id.
std::string appJwtClaims(uint64_t appId, int64_t now);

// An RS256 JWT over those claims, signed with `key` (an RSA private key); nullptr and `error`
// set when OpenSSL refuses. Held as a Secret: for its life it mints tokens for the whole
// installation.
std::shared_ptr<const Secret> signAppJwt(EVP_PKEY* key, uint64_t appId, int64_t now,
                                         std::string* error);

// The body of POST /app/installations/{id}/access_tokens: {"repositories": [...],
// "permissions": {...}}.
std::string tokenRequestBody(const std::vector<std::string>& repositories,
                             const std::vector<std::pair<std::string, std::string>>& permissions);

// A token, or why there is none (`error` never holds a secret).
struct MintedToken {
  std::shared_ptr<const Secret> token;
  std::chrono::system_clock::time_point expiresAt{};
  std::string error;
  bool ok() const { return token != nullptr; }
};

// Reads `token` and `expires_at` from a 201 answer; otherwise the status and the API's own
// `message` (printable, bounded, withheld if it contains `jwt`). Wipes res.body.
MintedToken parseTokenResponse(ApiResponse& res, const Secret* jwt);

// Mints installation tokens for one github_app credential: reads the App key from its source
// (file, env or exec) on each mint, so a rotated key is used at once, signs the JWT and asks
// the API for a token limited to the given repositories. Thread-safe.
class GithubAppMinter {
 public:
  GithubAppMinter(std::string credential, std::shared_ptr<const config::GithubApp> app,
                  std::shared_ptr<const ApiClient> client, ExecLimits exec,
                  std::chrono::milliseconds timeout);
  MintedToken mint(const std::vector<std::string>& repositories, std::stop_token stop) const;

  const std::string& credential() const { return credential_; }

 private:
  Fetched readKey(std::stop_token stop) const;

  std::string credential_;
  std::shared_ptr<const config::GithubApp> app_;
  std::shared_ptr<const ApiClient> client_;
  ExecLimits exec_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<FileSource> keyFile_;  // a `file:` key
};

// When a minted token is used and renewed.
struct TokenTiming {
  // A token is not handed out in its last `margin`: a request must not reach the API with a
  // token that expires on the way.
  std::chrono::milliseconds margin{60'000};
  // Renewed in the background once this fraction of its usable life has passed.
  double refreshFraction = 0.8;
  // After a failed mint, no new attempt before minBackoff, doubling up to maxBackoff.
  std::chrono::milliseconds minBackoff{1000};
  std::chrono::milliseconds maxBackoff{60'000};
};

// One token (one credential, one set of repositories), minted on demand and renewed before
// it expires. Single flight: while a mint runs, every other caller waits for its outcome
// rather than starting another, so one HTTP request serves every connection that waits.
// Thread-safe.
class TokenCache {
 public:
  using Clock = std::chrono::steady_clock;
  using Mint = std::function<MintedToken(std::stop_token)>;

  TokenCache(Mint mint, TokenTiming timing);

  // The token if it is usable now; else why not. Never mints.
  Fetched current() const;
  // current(), minting first when there is no usable token: joins a mint under way, or starts
  // one unless the last one failed less than the back-off ago (then that failure, at once:
  // an API that is down is asked once per back-off, not once per request).
  Fetched get(std::stop_token stop = {});
  // Mints now (or joins the mint under way), whatever the cached token: the refresher's call.
  Fetched refresh(std::stop_token stop = {});
  // When refresh() should run next: before the token expires, or once the back-off after a
  // failure is over.
  Clock::time_point refreshAt() const;

  uint64_t mints() const;   // mints started
  uint64_t joined() const;  // callers that waited for another's mint instead of starting one

 private:
  Fetched currentLocked(Clock::time_point now) const;
  Fetched mintLocked(std::unique_lock<std::mutex>& lock, std::stop_token stop);
  Fetched joinLocked(std::unique_lock<std::mutex>& lock);

  Mint mint_;
  TokenTiming timing_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const Secret> token_;
  Clock::time_point usableUntil_{};
  Clock::time_point refreshAt_{};  // min(): mint at once
  std::string error_;
  std::chrono::milliseconds backoff_{};
  bool inFlight_ = false;
  uint64_t generation_ = 0;  // mints finished
  uint64_t mints_ = 0;
  uint64_t joined_ = 0;
};

}  // namespace sandgate::broker
