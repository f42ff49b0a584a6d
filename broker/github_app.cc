// GitHub App JWTs, installation token requests and the single-flight token cache (see
// github_app.h).
#include "broker/github_app.h"

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/pem.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>

#include "common/encoding.h"

namespace sandgate::broker {

namespace json = boost::json;

namespace {

// What part of an API's answer may go into an error message: printable ASCII, bounded.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 300)) {
    auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : ' ';
  }
  if (s.size() > 300) out += "...";
  return out;
}

// "2026-12-02T05:10:00Z" (what GitHub writes) as a time point.
std::optional<std::chrono::system_clock::time_point> parseUtc(std::string_view s) {
  std::tm tm{};
  int consumed = 0;
  const std::string text(s);
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6 ||
      consumed != static_cast<int>(text.size())) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(t);
}

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

}  // namespace

std::string appJwtClaims(uint64_t appId, int64_t now) {
  json::object o;
  o["iat"] = now - 60;
  o["exp"] = now + 9 * 60;
  o["iss"] = appId;
  return json::serialize(o);
}

std::shared_ptr<const Secret> signAppJwt(EVP_PKEY* key, uint64_t appId, int64_t now,
                                         std::string* error) {
  if (key == nullptr || EVP_PKEY_base_id(key) != EVP_PKEY_RSA) {
    *error = "the App's private key is not an RSA key (GitHub signs App JWTs with RS256)";
    return nullptr;
  }
  std::string input = base64UrlEncode(R"({"alg":"RS256","typ":"JWT"})") + "." +
                      base64UrlEncode(appJwtClaims(appId, now));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  size_t len = 0;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(input.data()),
                     input.size()) != 1) {
    *error = "OpenSSL could not sign the App JWT";
    return nullptr;
  }
  std::string sig(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                     reinterpret_cast<const unsigned char*>(input.data()), input.size()) != 1) {
    *error = "OpenSSL could not sign the App JWT";
    return nullptr;
  }
  sig.resize(len);
  input += "." + base64UrlEncode(sig);
  return Secret::take(input);
}

std::string tokenRequestBody(const std::vector<std::string>& repositories,
                             const std::vector<std::pair<std::string, std::string>>& permissions) {
  json::object o;
  json::array repos;
  for (const auto& r : repositories) repos.emplace_back(r);
  o["repositories"] = std::move(repos);
  json::object perms;
  for (const auto& [name, level] : permissions) perms[name] = level;
  o["permissions"] = std::move(perms);
  return json::serialize(o);
}

MintedToken parseTokenResponse(ApiResponse& res, const Secret* jwt) {
  MintedToken out;
  // Parsed into a buffer of our own, wiped afterwards: the token's bytes must not stay behind
  // in freed heap.
  std::vector<unsigned char> arena(res.body.size() * 2 + 4096);
  {
    json::monotonic_resource mr(arena.data(), arena.size());
    boost::system::error_code ec;
    json::value v = json::parse(res.body, ec, &mr);
    const json::object* o = !ec ? v.if_object() : nullptr;
    if (res.status != 201) {
      std::string message;
      if (o) {
        if (const json::value* m = o->if_contains("message"); m && m->is_string()) {
          message = printable(std::string_view(m->as_string()));
        }
      }
      // reveal(): compared with the API's message, which is then withheld, not shown.
      if (jwt && message.find(jwt->reveal()) != std::string::npos) {
        message = "(message withheld: it contains the App JWT)";
      }
      out.error = message.empty() ? fmt::format("the API answered {}", res.status)
                                  : fmt::format("the API answered {}: {}", res.status, message);
    } else if (!o) {
      out.error = "the API's answer (201) is not a JSON object";
    } else {
      const json::value* t = o->if_contains("token");
      const json::value* e = o->if_contains("expires_at");
      std::optional<std::chrono::system_clock::time_point> when;
      if (e && e->is_string()) when = parseUtc(std::string_view(e->as_string()));
      if (!t || !t->is_string() || t->as_string().empty()) {
        out.error = "the API's answer (201) has no `token`";
      } else if (!when) {
        out.error = "the API's answer (201) has no `expires_at` in the form 2026-01-31T12:00:00Z";
      } else if (auto why = checkSecretBytes(std::string_view(t->as_string()))) {
        out.error = fmt::format("the API's token is unusable: {}", *why);
      } else {
        out.token = Secret::copyOf(std::string_view(t->as_string()));
        out.expiresAt = *when;
      }
    }
  }
  OPENSSL_cleanse(arena.data(), arena.size());
  wipe(res.body);
  return out;
}

// ---- minter -----------------------------------------------------------------------------

GithubAppMinter::GithubAppMinter(std::string credential,
                                 std::shared_ptr<const config::GithubApp> app,
                                 std::shared_ptr<const ApiClient> client, ExecLimits exec,
                                 std::chrono::milliseconds timeout)
    : credential_(std::move(credential)),
      app_(std::move(app)),
      client_(std::move(client)),
      exec_(exec),
      timeout_(timeout) {
  exec_.multiLine = true;
  if (app_->privateKey.kind == config::CredentialSource::Kind::kFile) {
    keyFile_ = std::make_unique<FileSource>(app_->privateKey.file, true);
  }
}

Fetched GithubAppMinter::readKey(std::stop_token stop) const {
  const auto& src = app_->privateKey;
  switch (src.kind) {
    case config::CredentialSource::Kind::kFile:
      return keyFile_->get();
    case config::CredentialSource::Kind::kEnv: {
      // A PEM has newlines, which a secret meant for a header may not: kept as it is.
      const char* v = std::getenv(src.env.c_str());
      if (v == nullptr)
        return {nullptr, fmt::format("environment variable {} is not set", src.env)};
      std::string raw(v);
      return finishSecret(raw, true);
    }
    case config::CredentialSource::Kind::kExec:
      return runExec(src.exec, exec_, stop);
    case config::CredentialSource::Kind::kGithubApp:
      break;
  }
  return {nullptr, "the App's private key has no file, env or exec source"};
}

MintedToken GithubAppMinter::mint(const std::vector<std::string>& repositories,
                                  std::stop_token stop) const {
  MintedToken out;
  Fetched key = readKey(stop);
  if (!key.ok()) {
    out.error = "cannot read the App's private key: " + key.error;
    return out;
  }
  // reveal(): parsed by OpenSSL in memory; the BIO reads the bytes in place.
  const std::string_view pem = key.secret->reveal();
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), int(pem.size())),
                                                BIO_free);
  PkeyPtr pkey(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr,
               EVP_PKEY_free);
  if (!pkey) {
    out.error = "the App's private key is not a PEM private key";
    return out;
  }
  std::string error;
  auto jwt = signAppJwt(pkey.get(), app_->appId, static_cast<int64_t>(std::time(nullptr)), &error);
  if (!jwt) {
    out.error = error;
    return out;
  }
  const std::string url =
      fmt::format("{}/app/installations/{}/access_tokens", app_->api, app_->installationId);
  const std::string body = tokenRequestBody(repositories, app_->permissions);
  ApiResponse res = client_->post(ApiRequest{credential_, url, jwt.get(), body, timeout_}, stop);
  if (!res.error.empty()) {
    wipe(res.body);
    out.error = fmt::format("POST {}: {}", url, res.error);
    return out;
  }
  out = parseTokenResponse(res, jwt.get());
  if (!out.ok()) out.error = fmt::format("POST {}: {}", url, out.error);
  return out;
}

// ---- cache ------------------------------------------------------------------------------

TokenCache::TokenCache(Mint mint, TokenTiming timing)
    : mint_(std::move(mint)), timing_(timing), backoff_(timing.minBackoff) {}

Fetched TokenCache::currentLocked(Clock::time_point now) const {
  if (token_ && now < usableUntil_) return {token_, {}};
  if (token_) {
    return {nullptr, error_.empty() ? "the minted token expired and was not renewed yet"
                                    : "the minted token expired and was not renewed: " + error_};
  }
  return {nullptr, error_.empty() ? "no token was minted yet" : error_};
}

Fetched TokenCache::current() const {
  std::lock_guard lock(mu_);
  return currentLocked(Clock::now());
}

Fetched TokenCache::joinLocked(std::unique_lock<std::mutex>& lock) {
  const uint64_t seen = generation_;
  ++joined_;
  cv_.wait(lock, [&] { return generation_ != seen; });
  return currentLocked(Clock::now());
}

Fetched TokenCache::mintLocked(std::unique_lock<std::mutex>& lock, std::stop_token stop) {
  inFlight_ = true;
  ++mints_;
  lock.unlock();
  MintedToken m = mint_(stop);
  const auto now = Clock::now();
  // The API's clock says when it expires; how long from now is what our steady clock keeps.
  const auto left =
      std::chrono::duration_cast<Clock::duration>(m.expiresAt - std::chrono::system_clock::now());
  lock.lock();
  if (m.ok() && left > timing_.margin) {
    token_ = std::move(m.token);  // the old Secret is wiped once the last request drops it
    usableUntil_ = now + left - timing_.margin;
    const auto usable = usableUntil_ - now;
    refreshAt_ =
        now + std::chrono::duration_cast<Clock::duration>(usable * timing_.refreshFraction);
    error_.clear();
    backoff_ = timing_.minBackoff;
  } else {
    error_ = m.ok() ? fmt::format("the API's token expires in {} s, within the {} s margin",
                                  std::chrono::duration_cast<std::chrono::seconds>(left).count(),
                                  timing_.margin.count() / 1000)
                    : std::move(m.error);
    refreshAt_ = now + backoff_;
    backoff_ = std::min(backoff_ * 2, timing_.maxBackoff);
  }
  inFlight_ = false;
  ++generation_;
  cv_.notify_all();
  return currentLocked(now);
}

Fetched TokenCache::get(std::stop_token stop) {
  std::unique_lock lock(mu_);
  const auto now = Clock::now();
  Fetched f = currentLocked(now);
  if (f.ok()) return f;
  if (inFlight_) return joinLocked(lock);
  // A failure within the back-off is answered as it is: no request per request.
  if (!error_.empty() && now < refreshAt_) return f;
  return mintLocked(lock, stop);
}

Fetched TokenCache::refresh(std::stop_token stop) {
  std::unique_lock lock(mu_);
  if (inFlight_) return joinLocked(lock);
  return mintLocked(lock, stop);
}

TokenCache::Clock::time_point TokenCache::refreshAt() const {
  std::lock_guard lock(mu_);
  return refreshAt_;
}

uint64_t TokenCache::mints() const {
  std::lock_guard lock(mu_);
  return mints_;
}

uint64_t TokenCache::joined() const {
  std::lock_guard lock(mu_);
  return joined_;
}

}  // namespace sandgate::broker
