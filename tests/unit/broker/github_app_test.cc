// Tests for broker/github_app.cc and its use by the store: the App JWT (signature checked with
// the public key, claims), the token request and answer, the single-flight cache, renewal
// before expiry, one token per narrowed set of repositories, and failures that fail closed.
#include "broker/github_app.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <atomic>
#include <boost/json.hpp>
#include <ctime>
#include <latch>
#include <mutex>
#include <thread>

#include "broker/injector.h"
#include "broker/store.h"
#include "broker/task_secrets.h"
#include "common/encoding.h"
#include "tests/unit/broker/test_util.h"

namespace sandgate::broker {
namespace {

using namespace testing;
namespace json = boost::json;
using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

PkeyPtr rsaKey() { return PkeyPtr(EVP_RSA_gen(2048), EVP_PKEY_free); }

std::string privatePem(EVP_PKEY* key) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, n);
}

// Splits a JWT, checks its RS256 signature with `key`'s public half, returns the claims.
std::optional<json::object> verifiedClaims(std::string_view jwt, EVP_PKEY* key) {
  const size_t a = jwt.find('.'), b = jwt.rfind('.');
  if (a == std::string_view::npos || a == b) return std::nullopt;
  auto header = base64UrlDecode(jwt.substr(0, a));
  auto claims = base64UrlDecode(jwt.substr(a + 1, b - a - 1));
  auto sig = base64UrlDecode(jwt.substr(b + 1));
  if (!header || !claims || !sig) return std::nullopt;
  if (json::parse(*header).as_object().at("alg").as_string() != "RS256") return std::nullopt;
  // Only the public key verifies: a signature that a wrong key or a changed byte breaks.
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  PEM_write_bio_PUBKEY(bio.get(), key);
  PkeyPtr pub(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  const std::string input(jwt.substr(0, b));
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, pub.get()) != 1 ||
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig->data()), sig->size(),
                       reinterpret_cast<const unsigned char*>(input.data()), input.size()) != 1) {
    return std::nullopt;
  }
  return json::parse(*claims).as_object();
}

TEST(GithubAppJwt, SignedWithRs256AndTheClaimsGitHubWants) {
  auto key = rsaKey();
  std::string error;
  const int64_t now = 1'800'000'000;
  auto jwt = signAppJwt(key.get(), 123456, now, &error);
  ASSERT_NE(jwt, nullptr) << error;
  auto claims = verifiedClaims(jwt->reveal(), key.get());
  ASSERT_TRUE(claims);
  EXPECT_EQ(claims->at("iss").to_number<int64_t>(), 123456);
  EXPECT_EQ(claims->at("iat").to_number<int64_t>(), now - 60);  // backdated against clock drift
  const int64_t exp = claims->at("exp").to_number<int64_t>();
  EXPECT_GT(exp, now);
  EXPECT_LE(exp - now, 600);  // GitHub refuses more than 10 minutes
  // Another key does not verify it: the check above is a real one.
  auto other = rsaKey();
  EXPECT_FALSE(verifiedClaims(jwt->reveal(), other.get()));
}

TEST(GithubAppJwt, ANonRsaKeyIsRefused) {
  PkeyPtr ec(EVP_EC_gen("P-256"), EVP_PKEY_free);
  std::string error;
  EXPECT_EQ(signAppJwt(ec.get(), 1, 0, &error), nullptr);
  EXPECT_NE(error.find("not an RSA key"), std::string::npos) << error;
}

TEST(GithubAppRequest, BodyNamesRepositoriesAndPermissions) {
  auto v = json::parse(tokenRequestBody({"widgets", "tools-cli"},
                                        {{"contents", "write"}, {"pull_requests", "read"}}));
  EXPECT_EQ(v.at("repositories"), json::parse(R"(["widgets","tools-cli"])"));
  EXPECT_EQ(v.at("permissions"), json::parse(R"({"contents":"write","pull_requests":"read"})"));
}

TEST(GithubAppResponse, TokenAndExpiryOrTheApisError) {
  ApiResponse ok{201, R"({"token":"ghs_abc","expires_at":"2030-01-02T03:04:05Z"})", ""};
  auto m = parseTokenResponse(ok, nullptr);
  ASSERT_TRUE(m.ok()) << m.error;
  EXPECT_EQ(m.token->reveal(), "ghs_abc");
  EXPECT_EQ(std::chrono::system_clock::to_time_t(m.expiresAt), 1893553445);
  EXPECT_TRUE(ok.body.empty());  // wiped

  ApiResponse refused{422, R"({"message":"There is at least one repository that does not exist"})",
                      ""};
  m = parseTokenResponse(refused, nullptr);
  EXPECT_FALSE(m.ok());
  EXPECT_EQ(m.error, "the API answered 422: There is at least one repository that does not exist");

  auto jwt = Secret::copyOf("eyJhbGciOiJSUzI1NiJ9.e30.c2ln");
  ApiResponse echoed{401, R"({"message":"bad token eyJhbGciOiJSUzI1NiJ9.e30.c2ln"})", ""};
  m = parseTokenResponse(echoed, jwt.get());
  EXPECT_EQ(m.error.find("eyJ"), std::string::npos) << m.error;
  EXPECT_NE(m.error.find("withheld"), std::string::npos) << m.error;

  ApiResponse noExpiry{201, R"({"token":"ghs_abc"})", ""};
  EXPECT_NE(parseTokenResponse(noExpiry, nullptr).error.find("expires_at"), std::string::npos);
}

MintedToken tokenFor(std::string value, std::chrono::seconds life) {
  return MintedToken{Secret::copyOf(value), std::chrono::system_clock::now() + life, {}};
}

TEST(TokenCache, OneMintServesEveryWaiter) {
  constexpr int kWaiters = 16;
  std::atomic<int> calls{0};
  std::latch release(1);
  TokenCache* cachePtr = nullptr;
  TokenCache cache(
      [&](std::stop_token) {
        ++calls;
        // Held until every other caller is waiting for this mint.
        release.wait();
        return tokenFor("tok-1", std::chrono::seconds(3600));
      },
      TokenTiming{});
  cachePtr = &cache;
  std::vector<std::shared_ptr<const Secret>> got(kWaiters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] { got[i] = cachePtr->get().secret; });
  }
  const bool allWaiting = eventually([&] { return cache.joined() == kWaiters - 1; });
  release.count_down();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(allWaiting) << "joined: " << cache.joined();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(cache.mints(), 1u);
  for (const auto& s : got) {
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s.get(), got[0].get());
  }
}

TEST(TokenCache, AFailureIsNotRetriedWithinTheBackoff) {
  int calls = 0;
  TokenCache cache(
      [&](std::stop_token) {
        ++calls;
        return MintedToken{nullptr, {}, "the API answered 503"};
      },
      TokenTiming{.minBackoff = std::chrono::milliseconds(60'000)});
  for (int i = 0; i < 5; ++i) {
    Fetched f = cache.get();
    EXPECT_FALSE(f.ok());
    EXPECT_EQ(f.error, "the API answered 503");
  }
  EXPECT_EQ(calls, 1);
}

// A fake GitHub: checks each request's JWT with the App's public key and answers with tokens
// "tok-<n>" that live `life`, or with `failure` when set.
class FakeApi : public ApiClient {
 public:
  explicit FakeApi(EVP_PKEY* key) : key_(key) {}
  ApiResponse post(const ApiRequest& req, std::stop_token) const override {
    std::lock_guard lock(mu_);
    urls.emplace_back(req.url);
    bodies.push_back(json::parse(req.body).as_object());
    if (!req.bearer || !verifiedClaims(req.bearer->reveal(), key_)) {
      return {401, R"({"message":"A JSON web token could not be decoded"})", ""};
    }
    if (!failure.empty()) return {422, json::serialize(json::object{{"message", failure}}), ""};
    const time_t exp = std::time(nullptr) + life.count();
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&exp));
    return {201,
            json::serialize(json::object{{"token", "tok-" + std::to_string(bodies.size())},
                                         {"expires_at", when}}),
            ""};
  }
  size_t count() const {
    std::lock_guard lock(mu_);
    return bodies.size();
  }

  mutable std::vector<std::string> urls;
  mutable std::vector<json::object> bodies;
  std::string failure;
  std::chrono::seconds life{3600};

 private:
  EVP_PKEY* key_;
  mutable std::mutex mu_;
};

class GithubAppStore : public ::testing::Test {
 protected:
  void SetUp() override {
    // One key for the suite: a 2048-bit RSA key takes OpenSSL a while to make.
    static PkeyPtr key = rsaKey();
    writeFile(dir_.file("app.pem"), privatePem(key.get()));
    api_ = std::make_shared<FakeApi>(key.get());
    auto app = std::make_shared<config::GithubApp>();
    app->appId = 123456;
    app->installationId = 7890;
    app->privateKey = fileSource(dir_.file("app.pem"));
    app->repositories = {{"widgets", {}}, {"tools-cli", {}}};
    app->permissions = {{"contents", "write"}};
    app->api = "https://api.github.example";
    config::CredentialSource src;
    src.kind = config::CredentialSource::Kind::kGithubApp;
    src.githubApp = app;
    auto& c = creds_["gh"] = headerCredential("gh", src, {"github.com", "api.github.com"});
    config::HostInjection git;
    git.host = {"github.com", {}};
    git.inject.kind = config::Injection::Kind::kBasic;
    git.inject.username = "x-access-token";
    config::HostInjection apiHost;
    apiHost.host = {"api.github.com", {}};
    apiHost.inject = c.inject;  // Authorization: Bearer {secret}
    c.injectPerHost = {git, apiHost};
    options_.api = api_;
    options_.startRefresh = false;
  }

  Result<std::shared_ptr<const SecretStore>> open(const std::vector<config::Task>& tasks = {}) {
    return SecretStore::open(creds_, "test.yaml", options_, tasks);
  }

  TempDir dir_;
  std::shared_ptr<FakeApi> api_;
  config::Credentials creds_;
  StoreOptions options_;
};

TEST_F(GithubAppStore, MintsAtOpenWithTheSourcesRepositoriesAndPermissions) {
  auto store = open();
  ASSERT_TRUE(store.ok()) << store.errorText();
  ASSERT_EQ(api_->count(), 1u);
  EXPECT_EQ(api_->urls[0], "https://api.github.example/app/installations/7890/access_tokens");
  EXPECT_EQ(api_->bodies[0].at("repositories"), json::parse(R"(["widgets","tools-cli"])"));
  EXPECT_EQ(api_->bodies[0].at("permissions"), json::parse(R"({"contents":"write"})"));
  for (int i = 0; i < 10; ++i) {
    Fetch f = (*store)->get("gh");
    ASSERT_TRUE(f.ok()) << f.detail;
    EXPECT_EQ(f.secret->reveal(), "tok-1");
  }
  EXPECT_EQ(api_->count(), 1u);  // cached: one mint however many requests
}

TEST_F(GithubAppStore, ATaskThatNarrowsTheSetGetsItsOwnToken) {
  config::Task narrow;
  narrow.name = "fix-widgets";
  narrow.repositories["gh"] = {{"Widgets", {}}};
  config::Task other;
  other.name = "other";
  auto store = open({narrow, other});
  ASSERT_TRUE(store.ok()) << store.errorText();
  ASSERT_EQ(api_->count(), 2u);
  // The map of scopes is ordered: the narrowed set's key ("widgets") sorts after the full one.
  std::vector<json::value> requested;
  for (const auto& b : api_->bodies) requested.push_back(b.at("repositories"));
  EXPECT_NE(std::find(requested.begin(), requested.end(), json::parse(R"(["Widgets"])")),
            requested.end());
  EXPECT_NE(
      std::find(requested.begin(), requested.end(), json::parse(R"(["widgets","tools-cli"])")),
      requested.end());
  Fetch mine = (*store)->get("gh", "fix-widgets");
  Fetch theirs = (*store)->get("gh", "other");
  Fetch none = (*store)->get("gh");
  ASSERT_TRUE(mine.ok() && theirs.ok() && none.ok());
  EXPECT_NE(mine.secret->reveal(), theirs.secret->reveal());
  EXPECT_EQ(theirs.secret->reveal(), none.secret->reveal());
  // Which token went with which request body.
  const size_t narrowIndex =
      api_->bodies[0].at("repositories") == json::parse(R"(["Widgets"])") ? 1 : 2;
  EXPECT_EQ(mine.secret->reveal(), "tok-" + std::to_string(narrowIndex));
}

TEST_F(GithubAppStore, RenewedInTheBackgroundBeforeItExpires) {
  api_->life = std::chrono::seconds(4);
  options_.tokens.margin = std::chrono::milliseconds(1000);
  options_.tokens.refreshFraction = 0.3;  // renewed ~1 s after it was minted
  auto store = open();
  ASSERT_TRUE(store.ok()) << store.errorText();
  (*store)->startRefresh();
  bool alwaysServed = true;
  const bool renewed = eventually([&] {
    Fetch f = (*store)->current("gh");
    alwaysServed = alwaysServed && f.ok();
    return f.ok() && f.secret->reveal() == "tok-2";
  });
  EXPECT_TRUE(renewed);
  EXPECT_TRUE(alwaysServed) << "a request found no usable token while the renewal was due";
  EXPECT_GE((*store)->refreshes(), 1u);
}

TEST_F(GithubAppStore, AnApiFailureFailsClosedWithTheApisMessage) {
  api_->failure = "There is at least one repository that does not exist";
  auto refused = open();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.errorText().find("There is at least one repository that does not exist"),
            std::string::npos)
      << refused.errorText();

  creds_["gh"].optional = true;
  auto store = open();
  ASSERT_TRUE(store.ok()) << store.errorText();
  Fetch f = (*store)->get("gh");
  EXPECT_FALSE(f.ok());
  EXPECT_EQ(f.reason, reason::kCredentialUnavailable);
  EXPECT_NE(f.detail.find("API answered 422: There is at least one repository"), std::string::npos)
      << f.detail;
}

TEST_F(GithubAppStore, EachHostGetsItsOwnInjection) {
  auto store = open();
  ASSERT_TRUE(store.ok()) << store.errorText();
  Injector injector(*store, creds_, nullptr);
  for (const auto& [host, want] : std::vector<std::pair<std::string, std::string>>{
           {"github.com", "Basic " + base64Encode("x-access-token:tok-1")},
           {"api.github.com", "Bearer tok-1"}}) {
    Headers h;
    std::string target = "/";
    auto r = injector.apply(OutgoingRequest{host, true, &h, &target}, "gh");
    ASSERT_TRUE(r.ok()) << r.detail;
    ASSERT_EQ(h.size(), 1u);
    EXPECT_EQ(h[0].first, "Authorization");
    EXPECT_EQ(h[0].second, want) << host;
  }
  // Both forms are scrubbed from responses: the token and its Basic token.
  auto forms = secretForms(creds_["gh"], (*store)->get("gh").secret);
  ASSERT_EQ(forms.size(), 2u);
  EXPECT_EQ(forms[1].basicUser, "x-access-token");
}

}  // namespace
}  // namespace sandgate::broker
