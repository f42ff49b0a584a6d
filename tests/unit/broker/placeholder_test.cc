// Tests for broker/placeholder.cc: format-preserving random placeholders and the request scan.
#include "broker/placeholder.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>

#include "broker/store.h"
#include "common/encoding.h"
#include "tests/unit/broker/test_util.h"

namespace sandgate::broker {
namespace {

using namespace testing;

bool isAlnum(std::string_view s) {
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

struct ShapeCase {
  const char* name;
  std::string secret;
  std::string prefix;
  size_t length;  // expected placeholder length
};

TEST(MakePlaceholder, PreservesKnownPrefixAndLength) {
  const std::string openai = "sk-" + std::string(48, 'A');
  const std::string project = "sk-proj-" + std::string(156, 'b');
  const std::string ghp = "ghp_" + std::string(36, 'C');
  const std::string pat = "github_pat_" + std::string(22, 'D') + "_" + std::string(59, 'e');
  const std::string slack = "xoxb-1234-5678-" + std::string(24, 'f');
  const ShapeCase cases[] = {
      {"openai", openai, "sk-", openai.size()},
      {"openai_project", project, "sk-proj-", project.size()},
      {"github_classic", ghp, "ghp_", ghp.size()},
      {"github_fine_grained", pat, "github_pat_", pat.size()},
      {"slack_bot", slack, "xoxb-", slack.size()},
      // Too short to be safely random at the same length: the random part is padded.
      {"short_known_prefix", "sk-abc", "sk-", 3 + kMinRandomChars},
      {"unknown_prefix", "plain-password-1234", "sandgate-placeholder-", 21 + 32},
      {"unavailable_secret", "", "sandgate-placeholder-", 21 + 32},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string p = makePlaceholder(c.secret);
    EXPECT_EQ(p.substr(0, c.prefix.size()), c.prefix) << p;
    EXPECT_EQ(p.size(), c.length) << p;
    EXPECT_TRUE(isAlnum(p.substr(c.prefix.size()))) << p;
    EXPECT_NE(p, c.secret);
    if (!c.secret.empty()) {
      EXPECT_EQ(p.find(c.secret), std::string::npos);
      EXPECT_EQ(c.secret.find(p), std::string::npos);
    }
    // The random part does not copy the secret's characters (the test secrets are runs of one
    // letter; a copy would show up as that letter at every position).
    std::string body = p.substr(c.prefix.size());
    EXPECT_GT(std::set<char>(body.begin(), body.end()).size(), 5u) << p;
  }
}

TEST(MakePlaceholder, RandomEveryTime) {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) seen.insert(makePlaceholder("ghp_" + std::string(36, 'x')));
  EXPECT_EQ(seen.size(), 200u);
}

class PlaceholderSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    writeFile(dir_.file("openai"), "sk-proj-" + std::string(40, 'Q') + "\n");
    writeFile(dir_.file("github"), "ghp_" + std::string(36, 'Z') + "\n");
    creds_["openai"] =
        headerCredential("openai", fileSource(dir_.file("openai")), {"api.openai.com"});
    creds_["openai"].placeholder = "OPENAI_API_KEY";
    creds_["github"] = headerCredential("github", fileSource(dir_.file("github")), {"github.com"});
    creds_["github"].placeholder = "GITHUB_TOKEN";
    creds_["noph"] = headerCredential("noph", fileSource(dir_.file("github")), {"x.example"});
    auto store = SecretStore::open(creds_, "test.yaml");
    ASSERT_TRUE(store.ok()) << store.errorText();
    store_ = std::move(store).value();
  }
  TempDir dir_;
  config::Credentials creds_;
  std::shared_ptr<const SecretStore> store_;
};

TEST_F(PlaceholderSetTest, OnePerDeclaringCredentialShapedAfterItsSecret) {
  auto set = PlaceholderSet::generate(creds_, *store_);
  ASSERT_EQ(set->all().size(), 2u);
  const Placeholder* openai = set->forCredential("openai");
  const Placeholder* github = set->forCredential("github");
  ASSERT_TRUE(openai && github);
  EXPECT_EQ(set->forCredential("noph"), nullptr);
  EXPECT_EQ(openai->variable, "OPENAI_API_KEY");
  EXPECT_EQ(openai->value.substr(0, 8), "sk-proj-");
  EXPECT_EQ(openai->value.size(), 48u);
  EXPECT_EQ(github->value.substr(0, 4), "ghp_");
  EXPECT_EQ(github->value.size(), 40u);
  auto env = set->environment();
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0].first, "GITHUB_TOKEN");
  EXPECT_EQ(env[0].second, github->value);
}

TEST_F(PlaceholderSetTest, UniquePerTask) {
  auto a = PlaceholderSet::generate(creds_, *store_);
  auto b = PlaceholderSet::generate(creds_, *store_);
  EXPECT_NE(a->forCredential("openai")->value, b->forCredential("openai")->value);
  EXPECT_NE(a->forCredential("github")->value, b->forCredential("github")->value);
}

TEST_F(PlaceholderSetTest, ScanTable) {
  auto set = PlaceholderSet::generate(creds_, *store_);
  const std::string oa = set->forCredential("openai")->value;
  const std::string gh = set->forCredential("github")->value;
  std::string encoded;
  for (char c : oa) encoded += fmt::format("%{:02X}", static_cast<unsigned char>(c));
  struct Case {
    const char* name;
    Headers headers;
    std::string target;
    const char* want;  // credential found first, or "" for none
  };
  const Case cases[] = {
      {"none", {{"Accept", "*/*"}}, "/v1/models?x=1", ""},
      {"bearer", {{"Authorization", "Bearer " + oa}}, "/", "openai"},
      {"custom_header", {{"X-Api-Key", gh}}, "/", "github"},
      {"inside_value", {{"Cookie", "a=1; tok=" + gh + "; b=2"}}, "/", "github"},
      {"basic_password", {{"Authorization", "Basic " + base64Encode("git:" + gh)}}, "/", "github"},
      {"basic_lowercase_scheme",
       {{"authorization", "basic " + base64Encode("x:" + oa)}},
       "/",
       "openai"},
      {"query", {}, "/v1?key=" + oa + "&b=2", "openai"},
      {"path", {}, "/exfil/" + gh, "github"},
      {"percent_encoded_query", {}, "/v1?key=" + encoded, "openai"},
      {"header_name", {{gh, "1"}}, "/", "github"},
      {"proxy_authorization_is_skipped",
       {{"Proxy-Authorization", "Basic " + base64Encode("task:" + oa)}},
       "/",
       ""},
      {"prefix_only", {{"Authorization", "Bearer " + oa.substr(0, oa.size() - 1)}}, "/", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const Placeholder* p = set->findIn(c.headers, c.target);
    EXPECT_EQ(set->containsAny(c.headers, c.target), p != nullptr);
    EXPECT_EQ(p ? p->credential : "", c.want);
  }
  Headers both = {{"A", oa}, {"B", gh}};
  EXPECT_EQ(set->findAll(both, "/").size(), 2u);
}

}  // namespace
}  // namespace sandgate::broker
