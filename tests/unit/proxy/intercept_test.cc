// Server-wide interception state (proxy/intercept/intercept.h): fails closed without a usable CA,
// writes ca_cert_out, and keeps one placeholder set per task across snapshots.
#include "proxy/intercept/intercept.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "proxy/state/token_placeholders.h"

namespace sandgate::proxy {
namespace {

namespace fs = std::filesystem;

fs::path tempDir() {
  char tmpl[] = "/tmp/sandgate-icpt-XXXXXX";
  return fs::path(mkdtemp(tmpl));
}

TEST(Interception, MissingCaKeyFailsClosed) {
  auto dir = tempDir();
  config::Config cfg;
  cfg.ca = config::Ca{(dir / "ca.pem").string(), (dir / "ca.key").string()};
  auto r = Interception::create(cfg);
  EXPECT_FALSE(r.ok());
  fs::remove_all(dir);
}

TEST(Interception, EphemeralCaIsWrittenToCaCertOut) {
  auto dir = tempDir();
  config::Config cfg;
  cfg.caCertOut = (dir / "sandgate-ca.pem").string();
  auto r = Interception::create(cfg);
  ASSERT_TRUE(r.ok());
  std::ifstream in(*cfg.caCertOut);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().rfind("-----BEGIN CERTIFICATE-----", 0), 0u);
  EXPECT_EQ(text.str().find("PRIVATE KEY"), std::string::npos);
  std::string error;
  auto leaf = r.value()->leaves().get("api.test", &error);
  ASSERT_TRUE(leaf) << error;
  EXPECT_EQ(leaf->host, "api.test");
  fs::remove_all(dir);
}

TEST(TokenPlaceholders, AreGeneratedOncePerTask) {
  constexpr const char* kSecret = "sk-unit0123456789abcdefghijklmnopqrstu";
  ASSERT_EQ(setenv("SANDGATE_ICPT_TEST_SECRET", kSecret, 1), 0);
  config::Credentials creds;
  auto& c = creds["openai"];
  c.name = "openai";
  c.source.kind = config::CredentialSource::Kind::kEnv;
  c.source.env = "SANDGATE_ICPT_TEST_SECRET";
  c.placeholder = "OPENAI_API_KEY";
  auto store1 = broker::SecretStore::open(creds, "test.yaml");
  auto store2 = broker::SecretStore::open(creds, "test.yaml");  // a reload's new store
  ASSERT_TRUE(store1.ok() && store2.ok());
  TokenPlaceholders sets;
  auto a = sets.forTask("demo", creds, *store1.value());
  auto b = sets.forTask("demo", creds, *store2.value());
  auto other = sets.forTask("other", creds, *store1.value());
  EXPECT_EQ(a, b);  // same set across reloads: the sandbox's environment cannot change
  ASSERT_TRUE(a->forCredential("openai") && other->forCredential("openai"));
  const std::string& pa = a->forCredential("openai")->value;
  EXPECT_NE(pa, other->forCredential("openai")->value);
  EXPECT_EQ(pa.find(kSecret), std::string::npos);
  EXPECT_EQ(pa.rfind("sk-", 0), 0u);
  EXPECT_EQ(pa.size(), std::string(kSecret).size());
  unsetenv("SANDGATE_ICPT_TEST_SECRET");
}

}  // namespace
}  // namespace sandgate::proxy
