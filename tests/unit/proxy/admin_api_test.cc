// Tests for proxy/admin/admin_api.cc, from the side of a caller without the admin token (401 before
// anything else), of an orchestrator minting and revoking, and of a config whose admin keys
// are wrong (refused at load, with the key path).
#include "proxy/admin/admin_api.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/beast/http/field.hpp>
#include <boost/json.hpp>

#include "proxy/identity/task_token.h"
#include "proxy/state/snapshot.h"
#include "tests/unit/broker/test_util.h"

namespace sandgate::proxy {
namespace {

namespace http = boost::beast::http;
namespace json = boost::json;
using broker::testing::TempDir;
using broker::testing::writeFile;

constexpr int64_t kNow = 1'800'000'000;
const std::string kAdminToken = "admin-token-0123456789abcdef";

class AdminApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    writeFile(dir.file("hs.key"), "0123456789abcdef0123456789abcdef-shared-key\n");
    writeFile(dir.file("admin.token"), kAdminToken + "\n");
  }

  // A snapshot of the test config with `adminApi` as metrics.admin_api (empty: none).
  Result<std::shared_ptr<const Snapshot>> snapshot(const std::string& adminApi,
                                                   const std::string& keys = "") {
    auto cfg = config::loadString(
        fmt::format(R"(policies:
  api: {{ allow: [ {{ host: api.test }} ] }}
  other: {{ allow: [ {{ host: other.test }} ] }}
tasks:
  - {{ name: t1, policy: api, limits: {{ max_connections: 7 }} }}
tokens:
  keys: [ {{ id: k1, file: {0}/hs.key }}{2} ]
{1}
)",
                    dir.path(), adminApi.empty() ? "" : "metrics:\n  admin_api: " + adminApi, keys),
        "admin.yaml");
    EXPECT_TRUE(cfg.ok()) << cfg.errorText();
    if (!cfg) return cfg.errors();
    return buildSnapshot(std::move(cfg.value()), registry, 1);
  }

  std::shared_ptr<const Snapshot> withMint() {
    auto s =
        snapshot(fmt::format("{{ token_file: {}/admin.token, mint: {{ kid: k1 }} }}", dir.path()));
    EXPECT_TRUE(s.ok()) << s.errorText();
    return s.ok() ? s.value() : nullptr;
  }

  static ApiRequest request(http::verb method, std::string target, std::string body = "",
                            std::optional<std::string> auth = "Bearer " + kAdminToken) {
    ApiRequest req{method, target, 11};
    if (auth) req.set(http::field::authorization, *auth);
    req.body() = std::move(body);
    req.prepare_payload();
    return req;
  }

  static json::object bodyOf(const ApiResponse& res) { return json::parse(res.body()).as_object(); }

  static std::string reasonOf(const ApiResponse& res) {
    auto o = bodyOf(res);
    return o.contains("reason") ? std::string(o["reason"].as_string()) : "";
  }

  TempDir dir;
  TaskRegistry registry;
};

TEST_F(AdminApiTest, OffByDefault) {
  auto snap = snapshot("");
  ASSERT_TRUE(snap.ok()) << snap.errorText();
  auto res = handleAdminApi(request(http::verb::get, "/v1/tasks"), *snap.value(), kNow);
  EXPECT_EQ(res.result(), http::status::not_found);
  EXPECT_EQ(reasonOf(res), "admin_api_off");
}

TEST_F(AdminApiTest, RefusalsExplainThemselves) {
  auto snap = withMint();
  ASSERT_TRUE(snap);
  struct Case {
    const char* name;
    ApiRequest req;
    http::status status;
    std::string reason;
  };
  std::vector<Case> cases = {
      {"no_auth", request(http::verb::get, "/v1/tasks", "", std::nullopt),
       http::status::unauthorized, "admin_auth_required"},
      {"wrong_token", request(http::verb::get, "/v1/tasks", "", "Bearer admin-token-wrong"),
       http::status::unauthorized, "admin_auth_invalid"},
      {"a_prefix_of_the_token",
       request(http::verb::get, "/v1/tasks", "", "Bearer " + kAdminToken.substr(0, 10)),
       http::status::unauthorized, "admin_auth_invalid"},
      {"basic_scheme", request(http::verb::get, "/v1/tasks", "", "Basic " + kAdminToken),
       http::status::unauthorized, "admin_auth_invalid"},
      // Unauthenticated, an unknown path says nothing about which paths exist.
      {"no_auth_unknown_path", request(http::verb::get, "/v1/nope", "", std::nullopt),
       http::status::unauthorized, "admin_auth_required"},
      {"unknown_path", request(http::verb::get, "/v1/nope"), http::status::not_found, "not_found"},
      {"wrong_method", request(http::verb::get, "/v1/tokens"), http::status::method_not_allowed,
       "method_not_allowed"},
      {"not_json", request(http::verb::post, "/v1/tokens", "task=t1"), http::status::bad_request,
       "bad_request"},
      {"unknown_field", request(http::verb::post, "/v1/tokens", R"({"task":"t1","tll":5})"),
       http::status::bad_request, "bad_request"},
      {"no_such_task", request(http::verb::post, "/v1/tokens", R"({"task":"nobody"})"),
       http::status::bad_request, "bad_request"},
      {"ttl_beyond_max_ttl",
       request(http::verb::post, "/v1/tokens", R"({"task":"t1","ttl":999999})"),
       http::status::bad_request, "bad_request"},
      {"bad_limits", request(http::verb::post, "/v1/tokens", R"({"task":"t1","limits":{"x":1}})"),
       http::status::bad_request, "bad_request"},
      // Tokens every replica would refuse (issue #38): checked as a replica binds them.
      {"pol_of_another_policy",
       request(http::verb::post, "/v1/tokens", R"({"task":"t1","policy":"other"})"),
       http::status::bad_request, "bad_request"},
      {"hosts_outside_the_policy",
       request(http::verb::post, "/v1/tokens", R"({"task":"t1","hosts":["other.test"]})"),
       http::status::bad_request, "bad_request"},
      {"limits_above_the_tasks",
       request(http::verb::post, "/v1/tokens", R"({"task":"t1","limits":{"max_connections":8}})"),
       http::status::bad_request, "bad_request"},
      {"adhoc_hosts_outside_its_policy",
       request(http::verb::post, "/v1/tokens",
               R"({"task":"sandbox-9","policy":"other","hosts":["api.test"]})"),
       http::status::bad_request, "bad_request"},
      {"src_not_an_address",
       request(http::verb::post, "/v1/tokens", R"({"task":"t1","src":"nowhere"})"),
       http::status::bad_request, "bad_request"},
      {"ttl_that_would_overflow",
       request(http::verb::post, "/v1/tokens", R"({"task":"t1","ttl":9223372036854775807})"),
       http::status::bad_request, "bad_request"},
      {"revoke_without_jti", request(http::verb::post, "/v1/revoke", "{}"),
       http::status::bad_request, "bad_request"},
  };
  for (const auto& c : cases) {
    auto res = handleAdminApi(c.req, *snap, kNow);
    EXPECT_EQ(res.result(), c.status) << c.name << ": " << res.body();
    EXPECT_EQ(reasonOf(res), c.reason) << c.name;
    EXPECT_EQ(res.body().find(kAdminToken), std::string::npos) << c.name;
    if (c.status == http::status::unauthorized) {
      EXPECT_EQ(res[http::field::www_authenticate], "Bearer realm=\"sandgate-admin\"") << c.name;
    }
  }
  auto res = handleAdminApi(request(http::verb::get, "/v1/revoke"), *snap, kNow);
  EXPECT_EQ(res[http::field::allow], "POST");
}

TEST_F(AdminApiTest, MintedTokensVerifyAndRevokeUntilTheNextReload) {
  auto snap = withMint();
  ASSERT_TRUE(snap);
  auto res = handleAdminApi(
      request(http::verb::post, "/v1/tokens",
              R"({"task":"sandbox-1","policy":"other","ttl":600,"hosts":["other.test"],)"
              R"("limits":{"max_connections":2},"jti":"j-admin-1"})"),
      *snap, kNow);
  ASSERT_EQ(res.result(), http::status::ok) << res.body();
  EXPECT_EQ(res[http::field::cache_control], "no-store");
  auto o = bodyOf(res);
  const std::string token(o["token"].as_string());
  EXPECT_EQ(o["claims"].as_object()["sub"].as_string(), "sandbox-1");
  EXPECT_EQ(o["claims"].as_object()["exp"].as_int64(), kNow + 600);
  TokenCheck check = snap->tokens->verify(token, kNow);
  ASSERT_TRUE(check.ok()) << check.detail;
  EXPECT_EQ(check.claims.policy, "other");
  EXPECT_EQ(check.claims.limits->maxConnections, 2u);

  res = handleAdminApi(request(http::verb::post, "/v1/revoke", R"({"jti":"j-admin-1"})"), *snap,
                       kNow);
  ASSERT_EQ(res.result(), http::status::ok) << res.body();
  EXPECT_EQ(snap->tokens->verify(token, kNow).reason, token_reason::kRevoked);
  // A reload builds a new verifier: the revocation is gone (tokens.revoked is what lasts).
  auto reloaded = withMint();
  ASSERT_TRUE(reloaded);
  EXPECT_TRUE(reloaded->tokens->verify(token, kNow).ok());
}

TEST_F(AdminApiTest, MintedTokensCarryTheConfiguredAudienceAndIssuer) {
  auto cfg = config::loadString(fmt::format(R"(policies:
  api: {{ allow: [ {{ host: api.test }} ] }}
tasks:
  - {{ name: t1, policy: api }}
tokens:
  keys: [ {{ id: k1, file: {0}/hs.key }} ]
  audience: sandgate-prod
  issuer: orchestrator
metrics:
  admin_api: {{ token_file: {0}/admin.token, mint: {{ kid: k1 }} }}
)",
                                            dir.path()),
                                "admin.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.errorText();
  auto built = buildSnapshot(std::move(cfg.value()), registry, 1);
  ASSERT_TRUE(built.ok()) << built.errorText();
  auto res = handleAdminApi(request(http::verb::post, "/v1/tokens", R"({"task":"t1"})"),
                            *built.value(), kNow);
  ASSERT_EQ(res.result(), http::status::ok) << res.body();
  auto claims = bodyOf(res)["claims"].as_object();
  EXPECT_EQ(claims["aud"].as_string(), "sandgate-prod");
  EXPECT_EQ(claims["iss"].as_string(), "orchestrator");
  EXPECT_TRUE(
      built.value()->tokens->verify(std::string(bodyOf(res)["token"].as_string()), kNow).ok());
}

TEST_F(AdminApiTest, TasksListsThisReplicasConnections) {
  auto snap = withMint();
  ASSERT_TRUE(snap);
  const TaskEntry& t1 = *snap->findTask("t1");
  ASSERT_TRUE(t1.state->tryAcquireConnection(7));
  ASSERT_TRUE(t1.state->tryAcquireTunnel(7));
  auto adhoc = snap->adhocStates->get("sandbox-2", kNow + 60, kNow);
  ASSERT_TRUE(adhoc->tryAcquireConnection(1));
  auto res = handleAdminApi(request(http::verb::get, "/v1/tasks"), *snap, kNow);
  ASSERT_EQ(res.result(), http::status::ok) << res.body();
  EXPECT_EQ(json::parse(res.body()),
            json::parse(R"({"tasks":[{"name":"t1","policy":"api","connections":1,"tunnels":1,)"
                        R"("max_connections":7,"max_tunnels":256}],)"
                        R"("adhoc":[{"name":"sandbox-2","connections":1,"tunnels":0}]})"))
      << res.body();
  t1.state->releaseConnection();
  t1.state->releaseTunnel();
  adhoc->releaseConnection();
}

TEST_F(AdminApiTest, MintingNeedsAKey) {
  auto snap = snapshot(fmt::format("{{ token_file: {}/admin.token }}", dir.path()));
  ASSERT_TRUE(snap.ok()) << snap.errorText();
  auto res = handleAdminApi(request(http::verb::post, "/v1/tokens", R"({"task":"t1"})"),
                            *snap.value(), kNow);
  EXPECT_EQ(res.result(), http::status::forbidden);
  EXPECT_EQ(reasonOf(res), "minting_not_configured");
}

TEST_F(AdminApiTest, BadAdminKeysAreConfigErrors) {
  writeFile(dir.file("short.token"), "short\n");
  writeFile(dir.file("other.key"), "another-shared-key-0123456789abcdef-0123\n");
  struct Case {
    const char* name;
    std::string adminApi;
    std::string keyPath;
  };
  const std::string d = dir.path();
  std::vector<Case> cases = {
      {"missing_token_file", fmt::format("{{ token_file: {}/none }}", d),
       "metrics.admin_api.token_file"},
      {"short_token", fmt::format("{{ token_file: {}/short.token }}", d),
       "metrics.admin_api.token_file"},
      {"unknown_kid", fmt::format("{{ token_file: {}/admin.token, mint: {{ kid: k9 }} }}", d),
       "metrics.admin_api.mint.kid"},
      {"a_key_that_does_not_match",
       fmt::format("{{ token_file: {0}/admin.token, mint: {{ kid: k1, file: {0}/other.key }} }}",
                   d),
       "metrics.admin_api.mint.file"},
  };
  for (const auto& c : cases) {
    auto snap = snapshot(c.adminApi);
    ASSERT_FALSE(snap.ok()) << c.name;
    EXPECT_NE(snap.errorText().find(c.keyPath), std::string::npos)
        << c.name << ": " << snap.errorText();
  }
}

}  // namespace
}  // namespace sandgate::proxy
