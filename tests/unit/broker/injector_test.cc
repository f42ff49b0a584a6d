// Tests for broker/injector.cc: injection replaces (never appends), a placeholder is honoured only
// where its credential is injected, on its hosts, on a request whose rule names it, and every
// refusal leaves the request untouched.
#include "broker/injector.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "broker/scrubber.h"
#include "common/encoding.h"
#include "tests/unit/broker/test_util.h"

namespace sandgate::broker {
namespace {

using namespace testing;

constexpr std::string_view kOpenAi = "sk-proj-REALREALREALREALREALREALREAL";
constexpr std::string_view kGitHub = "ghp_REALGITHUBTOKENREALGITHUBTOKEN123";
constexpr std::string_view kMaps = "maps key/with+odd&chars";

class InjectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    writeFile(dir_.file("openai"), std::string(kOpenAi) + "\n");
    writeFile(dir_.file("github"), std::string(kGitHub) + "\n");
    writeFile(dir_.file("maps"), std::string(kMaps) + "\n");
    auto& oa = creds_["openai"] =
        headerCredential("openai", fileSource(dir_.file("openai")), {"api.openai.com"});
    oa.placeholder = "OPENAI_API_KEY";
    auto& gh = creds_["github"] = headerCredential("github", fileSource(dir_.file("github")),
                                                   {"github.com", "*.githubusercontent.com"});
    gh.inject.kind = config::Injection::Kind::kBasic;
    gh.inject.username = "x-access-token";
    gh.placeholder = "GITHUB_TOKEN";
    auto& maps = creds_["maps"] =
        headerCredential("maps", fileSource(dir_.file("maps")), {"maps.example.com"});
    maps.inject.kind = config::Injection::Kind::kQuery;
    maps.inject.query = "key";
    maps.placeholder = "MAPS_KEY";
    auto& custom = creds_["custom"] =
        headerCredential("custom", fileSource(dir_.file("openai")), {"plain.example.com"});
    custom.inject.header = "X-Api-Key";
    custom.inject.value = "{secret}";
    custom.allowPlaintext = true;
    creds_["missing"] =
        headerCredential("missing", fileSource(dir_.file("nope")), {"api.openai.com"});
    creds_["missing"].optional = true;
    // An SSH key credential (issue #42): no inject, so its Injection is the empty default.
    auto& deploy = creds_["deploy"] =
        headerCredential("deploy", fileSource(dir_.file("openai")), {"git.example.com"});
    deploy.inject = config::Injection{};
    deploy.ssh = config::Credential::Ssh{{}, "git", "/dev/null"};
    auto store = SecretStore::open(creds_, "test.yaml");
    ASSERT_TRUE(store.ok()) << store.errorText();
    store_ = std::move(store).value();
    placeholders_ = PlaceholderSet::generate(creds_, *store_);
    injector_ = std::make_unique<Injector>(store_, creds_, placeholders_);
  }

  std::string ph(const char* cred) { return placeholders_->forCredential(cred)->value; }

  InjectResult apply(std::string_view host, Headers& h, std::string& target,
                     std::string_view credential, bool tls = true) {
    return injector_->apply(OutgoingRequest{host, tls, &h, &target}, credential);
  }

  TempDir dir_;
  config::Credentials creds_;
  std::shared_ptr<const SecretStore> store_;
  std::shared_ptr<const PlaceholderSet> placeholders_;
  std::unique_ptr<Injector> injector_;
};

int countHeader(const Headers& h, std::string_view name) {
  int n = 0;
  for (const auto& [k, v] : h) n += iequals(k, name);
  return n;
}

std::string headerValue(const Headers& h, std::string_view name) {
  for (const auto& [k, v] : h) {
    if (iequals(k, name)) return v;
  }
  return "<absent>";
}

TEST_F(InjectorTest, HeaderInjectionReplacesWhatTheClientSent) {
  struct Case {
    const char* name;
    Headers sent;
  };
  const Case cases[] = {
      {"none", {{"Accept", "*/*"}}},
      {"one", {{"Authorization", "Bearer client-value"}}},
      {"two", {{"Authorization", "Bearer a"}, {"Accept", "*/*"}, {"Authorization", "Bearer b"}}},
      {"other_case", {{"AUTHORIZATION", "Bearer c"}, {"authorization", "Basic d"}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Headers h = c.sent;
    std::string target = "/v1/responses";
    InjectResult r = apply("api.openai.com", h, target, "openai");
    ASSERT_TRUE(r.ok()) << r.detail;
    EXPECT_EQ(r.credential, "openai");
    EXPECT_TRUE(r.injected);
    EXPECT_EQ(countHeader(h, "authorization"), 1);
    EXPECT_EQ(headerValue(h, "authorization"), "Bearer " + std::string(kOpenAi));
    EXPECT_EQ(countHeader(h, "accept"), countHeader(c.sent, "accept"));
    ASSERT_EQ(r.scrub.size(), 1u);
    EXPECT_EQ(r.scrub[0].replacement, ph("openai"));
  }
}

TEST_F(InjectorTest, CustomHeaderTemplateWithoutPlaceholderRedacts) {
  Headers h = {{"x-api-key", "mine"}};
  std::string target = "/";
  InjectResult r = apply("plain.example.com", h, target, "custom");
  ASSERT_TRUE(r.ok()) << r.detail;
  EXPECT_EQ(h, (Headers{{"X-Api-Key", std::string(kOpenAi)}}));
  ASSERT_EQ(r.scrub.size(), 1u);
  EXPECT_EQ(r.scrub[0].replacement, "[REDACTED:custom]");
}

// A rule that admits HTTP to an SSH key's host: the key must never go into the request.
TEST_F(InjectorTest, AnSshKeyIsNeverInjected) {
  Headers h{{"Accept", "*/*"}};
  std::string target = "/org/repo.git/info/refs";
  InjectResult r = apply("git.example.com", h, target, "deploy");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.reason, reason::kCredentialUnavailable);
  EXPECT_FALSE(r.injected);
  EXPECT_EQ(h, (Headers{{"Accept", "*/*"}}));
  EXPECT_EQ(target, "/org/repo.git/info/refs");
}

TEST_F(InjectorTest, BasicInjection) {
  Headers h = {{"Authorization", "Basic Zm9vOmJhcg=="}};
  std::string target = "/org/repo.git/info/refs?service=git-upload-pack";
  InjectResult r = apply("github.com", h, target, "github");
  ASSERT_TRUE(r.ok()) << r.detail;
  std::string token = base64Encode("x-access-token:" + std::string(kGitHub));
  EXPECT_EQ(h, (Headers{{"Authorization", "Basic " + token}}));
  // Scrub both the raw secret and the Basic form (echoed back as the client would have sent it).
  ASSERT_EQ(r.scrub.size(), 2u);
  EXPECT_TRUE(r.scrub[1].needle->equals(token));
  EXPECT_EQ(r.scrub[1].replacement, base64Encode("x-access-token:" + ph("github")));
}

TEST_F(InjectorTest, QueryInjectionTable) {
  const std::string enc = percentEncode(kMaps);
  struct Case {
    const char* name;
    std::string target;
    std::string want;
  };
  const Case cases[] = {
      {"no_query", "/geo", "/geo?key=" + enc},
      {"empty_query", "/geo?", "/geo?key=" + enc},
      {"other_params_kept", "/geo?a=1&b=2", "/geo?a=1&b=2&key=" + enc},
      {"client_key_replaced", "/geo?key=mine&a=1&key=again", "/geo?a=1&key=" + enc},
      {"encoded_name_replaced", "/geo?%6Bey=mine&a=1", "/geo?a=1&key=" + enc},
      {"similar_name_kept", "/geo?keys=1&akey=2", "/geo?keys=1&akey=2&key=" + enc},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Headers h;
    std::string target = c.target;
    InjectResult r = apply("maps.example.com", h, target, "maps");
    ASSERT_TRUE(r.ok()) << r.detail;
    EXPECT_EQ(target, c.want);
    // One rule for the secret scrubs its percent-encoded form (and every other URL form).
    ASSERT_EQ(r.scrub.size(), 1u);
    EXPECT_TRUE(r.scrub[0].urlForms);
    Scrubber s(r.scrub);
    std::string out;
    s.feed("echo: " + enc, out);
    s.finish(out);
    EXPECT_EQ(percentDecode(out, true), "echo: " + r.scrub[0].replacement);
  }
}

TEST_F(InjectorTest, PlaceholderWhereItsCredentialIsInjectedIsReplaced) {
  const std::string oa = ph("openai");
  const std::string gh = ph("github");
  const std::string mp = ph("maps");
  struct Case {
    const char* name;
    std::string host;
    Headers sent;
    std::string target;
    std::string credential;
    Headers want;
    std::string wantTarget;
  };
  const Case cases[] = {
      {"configured_header",
       "API.OpenAI.com.",
       {{"Authorization", "Bearer " + oa}, {"Accept", "*/*"}},
       "/v1/models?x=1",
       "openai",
       {{"Accept", "*/*"}, {"Authorization", "Bearer " + std::string(kOpenAi)}},
       "/v1/models?x=1"},
      {"basic_token",
       "raw.githubusercontent.com",
       {{"Authorization", "Basic " + base64Encode("octocat:" + gh)}},
       "/org/repo.git/info/refs",
       "github",
       {{"Authorization", "Basic " + base64Encode("x-access-token:" + std::string(kGitHub))}},
       "/org/repo.git/info/refs"},
      {"configured_query_parameter",
       "maps.example.com",
       {},
       "/geo?key=" + mp + "&a=1",
       "maps",
       {},
       "/geo?a=1&key=" + percentEncode(kMaps)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Headers h = c.sent;
    std::string target = c.target;
    InjectResult r = apply(c.host, h, target, c.credential);
    ASSERT_TRUE(r.ok()) << r.detail;
    EXPECT_EQ(r.credential, c.credential);
    EXPECT_TRUE(r.injected);
    EXPECT_TRUE(r.placeholder);
    EXPECT_EQ(h, c.want);
    EXPECT_EQ(target, c.wantTarget);
    ASSERT_GE(r.scrub.size(), 1u);
    EXPECT_EQ(r.scrub[0].replacement, ph(c.credential.c_str()));
  }
  // Injected without a placeholder: counted as sandgate's own injection.
  Headers h;
  std::string target = "/";
  InjectResult r = apply("api.openai.com", h, target, "openai");
  ASSERT_TRUE(r.ok()) << r.detail;
  EXPECT_TRUE(r.injected);
  EXPECT_FALSE(r.placeholder);
}

TEST_F(InjectorTest, PlaceholderAnywhereElseIsRefused) {
  const std::string oa = ph("openai");
  const std::string gh = ph("github");
  const std::string mp = ph("maps");
  struct Case {
    const char* name;
    std::string host;
    Headers headers;
    std::string target;
    std::string credential;
    const char* blamed;
    const char* where;  // in the detail
  };
  const Case cases[] = {
      {"user_agent",
       "api.openai.com",
       {{"User-Agent", "agent/" + oa}},
       "/",
       "openai",
       "openai",
       "in header User-Agent"},
      {"cookie",
       "api.openai.com",
       {{"Cookie", "s=" + oa}},
       "/",
       "openai",
       "openai",
       "in header Cookie"},
      {"x_header",
       "api.openai.com",
       {{"X-Api-Key", oa}},
       "/",
       "openai",
       "openai",
       "in header X-Api-Key"},
      {"basic_in_another_header",
       "api.openai.com",
       {{"X-Basic", "Basic " + base64Encode("u:" + oa)}},
       "/",
       "openai",
       "openai",
       "in header X-Basic"},
      {"header_name",
       "api.openai.com",
       {{"X-" + oa, "1"}},
       "/",
       "openai",
       "openai",
       "in a header name"},
      {"query_parameter",
       "api.openai.com",
       {},
       "/v1?api_key=" + oa,
       "openai",
       "openai",
       "in query parameter api_key"},
      {"path", "api.openai.com", {}, "/v1/" + oa + "/x", "openai", "openai", "in the path"},
      {"percent_encoded_path",
       "api.openai.com",
       {},
       "/v1/%" + fmt::format("{:02X}", oa[0]) + oa.substr(1),
       "openai",
       "openai",
       "in the path"},
      {"basic_credential_as_bearer",
       "github.com",
       {{"Authorization", "Bearer " + gh}},
       "/",
       "github",
       "github",
       "in header Authorization"},
      {"basic_credential_in_another_header",
       "github.com",
       {{"X-Auth", "Basic " + base64Encode("u:" + gh)}},
       "/",
       "github",
       "github",
       "in header X-Auth"},
      {"query_credential_in_other_parameter",
       "maps.example.com",
       {},
       "/geo?key=x&note=" + mp,
       "maps",
       "maps",
       "in query parameter note"},
      {"query_credential_in_header",
       "maps.example.com",
       {{"X-Goog-Api-Key", mp}},
       "/geo",
       "maps",
       "maps",
       "in header X-Goog-Api-Key"},
      // A rule's methods and paths bind its credential: another rule's request gets nothing.
      {"rule_without_credential",
       "api.openai.com",
       {{"Authorization", "Bearer " + oa}},
       "/",
       "",
       "openai",
       "the rule that admitted it names no credential"},
      {"rule_with_another_credential",
       "api.openai.com",
       {{"Authorization", "Bearer " + oa}},
       "/",
       "missing",
       "openai",
       "names credential `missing`"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Headers h = c.headers;
    std::string target = c.target;
    InjectResult r = apply(c.host, h, target, c.credential);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.reason, reason::kPlaceholderMisplaced) << r.detail;
    EXPECT_EQ(r.credential, c.blamed);
    EXPECT_TRUE(r.placeholder);
    EXPECT_FALSE(r.injected);
    EXPECT_THAT(r.detail, ::testing::HasSubstr("possible exfiltration attempt"));
    EXPECT_THAT(r.detail, ::testing::HasSubstr(c.where));
    EXPECT_EQ(h, c.headers);
    EXPECT_EQ(target, c.target);
    EXPECT_TRUE(r.scrub.empty());
  }
}

TEST_F(InjectorTest, NothingInjectedWithoutCredentialOrPlaceholder) {
  Headers h = {{"Authorization", "Bearer mine"}};
  std::string target = "/v1/models";
  InjectResult r = apply("api.openai.com", h, target, "");
  ASSERT_TRUE(r.ok()) << r.detail;
  EXPECT_FALSE(r.injected);
  EXPECT_TRUE(r.scrub.empty());
  EXPECT_EQ(h, (Headers{{"Authorization", "Bearer mine"}}));
}

TEST_F(InjectorTest, ScrubFalseInjectsButAsksForNoScrubbing) {
  // The injector reads the credentials it was given, not a copy: the change takes effect.
  creds_["openai"].scrub = false;
  creds_["github"].scrub = false;
  const std::string oa = ph("openai");
  Headers h = {{"Authorization", "Bearer " + oa}};
  std::string target = "/v1/models";
  InjectResult r = apply("api.openai.com", h, target, "openai");
  ASSERT_TRUE(r.ok()) << r.detail;
  EXPECT_TRUE(r.injected);
  EXPECT_EQ(h, (Headers{{"Authorization", "Bearer " + std::string(kOpenAi)}}));
  EXPECT_TRUE(r.scrub.empty());
  // Basic forms (injected, and a placeholder inside a client's token) are not kept either.
  Headers g = {{"Authorization", "Basic " + base64Encode("octocat:" + ph("github"))}};
  std::string path = "/org/repo.git/info/refs";
  InjectResult b = apply("github.com", g, path, "github");
  ASSERT_TRUE(b.ok()) << b.detail;
  EXPECT_TRUE(b.injected);
  EXPECT_EQ(g[0].second, "Basic " + base64Encode("x-access-token:" + std::string(kGitHub)));
  EXPECT_TRUE(b.scrub.empty());
  Headers i;
  InjectResult c = apply("github.com", i, path, "github");
  ASSERT_TRUE(c.ok()) << c.detail;
  EXPECT_TRUE(c.injected);
  EXPECT_TRUE(c.scrub.empty());
}

TEST_F(InjectorTest, PlaceholderInsideBasicForGit) {
  const std::string gh = ph("github");
  Headers h = {{"Authorization", "Basic " + base64Encode("octocat:" + gh)}};
  std::string target = "/org/repo.git/info/refs";
  InjectResult r = apply("raw.githubusercontent.com", h, target, "github");
  ASSERT_TRUE(r.ok()) << r.detail;
  // Injection replaces the client's token, user name included.
  std::string sent = base64Encode("x-access-token:" + std::string(kGitHub));
  EXPECT_EQ(h, (Headers{{"Authorization", "Basic " + sent}}));
  bool scrubsBasicForm = false;
  for (const auto& s : r.scrub) {
    if (s.needle->equals(sent)) {
      scrubsBasicForm = true;
      EXPECT_EQ(s.replacement, base64Encode("x-access-token:" + gh));
    }
  }
  EXPECT_TRUE(scrubsBasicForm);
}

TEST_F(InjectorTest, RefusalsLeaveTheRequestUntouched) {
  const std::string oa = ph("openai");
  const std::string gh = ph("github");
  struct Case {
    const char* name;
    std::string host;
    Headers headers;
    std::string target;
    std::string credential;
    bool tls;
    std::string_view reason;
    const char* blamed;
  };
  const Case cases[] = {
      {"placeholder_in_header_to_other_host",
       "evil.example",
       {{"Authorization", "Bearer " + oa}},
       "/",
       "",
       true,
       reason::kCredentialHostMismatch,
       "openai"},
      {"placeholder_in_query_to_other_host",
       "evil.example",
       {},
       "/?k=" + gh,
       "",
       true,
       reason::kCredentialHostMismatch,
       "github"},
      {"placeholder_in_basic_to_other_host",
       "evil.example",
       {{"Authorization", "Basic " + base64Encode("u:" + gh)}},
       "/",
       "",
       true,
       reason::kCredentialHostMismatch,
       "github"},
      {"wildcard_does_not_cover_apex",
       "githubusercontent.com",
       {{"X", gh}},
       "/",
       "",
       true,
       reason::kCredentialHostMismatch,
       "github"},
      {"placeholder_of_other_credential_on_allowed_host",
       "api.openai.com",
       {{"X", gh}},
       "/",
       "openai",
       true,
       reason::kCredentialHostMismatch,
       "github"},
      {"rule_credential_for_wrong_host",
       "api.evil.example",
       {{"Accept", "*/*"}},
       "/",
       "openai",
       true,
       reason::kCredentialHostMismatch,
       "openai"},
      {"unavailable",
       "api.openai.com",
       {{"Authorization", "Bearer mine"}},
       "/",
       "missing",
       true,
       reason::kCredentialUnavailable,
       "missing"},
      {"unknown_credential",
       "api.openai.com",
       {},
       "/",
       "nosuch",
       true,
       reason::kCredentialUnavailable,
       "nosuch"},
      {"plaintext",
       "api.openai.com",
       {{"Authorization", "Bearer " + oa}},
       "/",
       "openai",
       false,
       reason::kCredentialRequiresTls,
       "openai"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Headers h = c.headers;
    std::string target = c.target;
    InjectResult r = apply(c.host, h, target, c.credential, c.tls);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.reason, c.reason) << r.detail;
    EXPECT_EQ(r.credential, c.blamed);
    EXPECT_EQ(h, c.headers);
    EXPECT_EQ(target, c.target);
    EXPECT_TRUE(r.scrub.empty());
    for (auto secret : {kOpenAi, kGitHub}) {
      EXPECT_EQ(r.detail.find(secret), std::string::npos) << r.detail;
    }
  }
}

TEST_F(InjectorTest, PlaintextAllowedWhereTheCredentialSaysSo) {
  Headers h;
  std::string target = "/";
  InjectResult r = apply("plain.example.com", h, target, "custom", /*tls=*/false);
  ASSERT_TRUE(r.ok()) << r.detail;
  EXPECT_EQ(headerValue(h, "x-api-key"), kOpenAi);
}

TEST_F(InjectorTest, NoCredentialNoPlaceholderIsANoOp) {
  Headers h = {{"Authorization", "Bearer client"}};
  std::string target = "/x?y=1";
  InjectResult r = apply("anything.example", h, target, "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(h, (Headers{{"Authorization", "Bearer client"}}));
  EXPECT_EQ(target, "/x?y=1");
  EXPECT_TRUE(r.scrub.empty());
  EXPECT_FALSE(injector_->containsPlaceholder(h, target));
}

TEST(CredentialHostMatches, Table) {
  struct Case {
    const char* pattern;
    const char* host;
    bool want;
  };
  const Case cases[] = {
      {"api.openai.com", "api.openai.com", true},
      {"api.openai.com", "API.OPENAI.COM", true},
      {"api.openai.com", "api.openai.com.", true},
      {"api.openai.com.", "api.openai.com", true},
      {"api.openai.com", "openai.com", false},
      {"api.openai.com", "xapi.openai.com", false},
      {"api.openai.com", "api.openai.com.evil", false},
      {"*.example.com", "a.example.com", true},
      {"*.example.com", "a.b.example.com", true},
      {"*.example.com", "example.com", false},
      {"*.example.com", "aexample.com", false},
      {"*.example.com", ".example.com", false},
      {"*.EXAMPLE.com", "a.example.COM.", true},
      {"*.example.com", "a.example.co", false},
      {"re:.*", "anything", false},
      {"10.0.0.1", "10.0.0.1", true},
      {"[::1]", "::1", true},
      {"", "", false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(credentialHostMatches(c.pattern, c.host), c.want) << c.pattern << " vs " << c.host;
  }
}

}  // namespace
}  // namespace sandgate::broker
