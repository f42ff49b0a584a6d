// Learn mode (tasks[].mode: learn) in the engine: only the want of a rule is waived; deny rules,
// the global deny list, denied address ranges (literal or resolved) and ambiguous paths still
// refuse, a learn admission never carries a credential, and a name `resolve:` pins may be
// dialled in private ranges but never at a cloud metadata address.
#include <gtest/gtest.h>

#include <variant>

#include "config/config.h"
#include "policy/engine.h"

namespace sandgate::policy {
namespace {

constexpr const char* kConfig = R"(
credentials:
  api:
    source: { env: API_KEY_FOR_TEST }
    hosts: [api.test]
    inject: { header: Authorization, value: "Bearer {secret}" }
global:
  deny: [{ host: gdeny.test }]
policies:
  agent:
    allow:
      - { host: api.test, credential: api, methods: [GET], paths: ["/v1/**"] }
    deny:
      - { host: blocked.test }
      - { host: ro.test, methods: [DELETE] }
tasks:
  - { name: learner, policy: agent, mode: learn }
  - { name: strict, policy: agent }
resolve:
  pinned.test: 10.1.2.3
  meta.test: 169.254.169.254
)";

std::shared_ptr<const Engine> engine() {
  auto cfg = config::loadString(kConfig, "learn.yaml");
  EXPECT_TRUE(cfg) << (cfg ? "" : cfg.errors().front().str());
  auto e = Engine::compile(cfg.value());
  EXPECT_TRUE(e) << (e ? "" : e.errors().front().str());
  return e.value();
}

Request req(const char* host, uint16_t port = 443, const char* method = nullptr,
            const char* path = nullptr) {
  Request r;
  r.target = std::get<Target>(normalizeHost(host));
  r.port = port;
  if (method) r.method = method;
  if (path) r.path = path;
  return r;
}

TEST(LearnMode, AdmitsWhatOnlyTheWantOfARuleRefusesWithoutACredential) {
  auto e = engine();
  struct Case {
    const char* host;
    const char* method;
    const char* path;
    std::string_view reason;
  } cases[] = {
      {"unknown.test", nullptr, nullptr, reason::kNoMatchingRule},
      {"unknown.test", "GET", "/x", reason::kNoMatchingRule},
      {"api.test", "POST", "/v1/a", reason::kMethodNotAllowed},
      {"api.test", "GET", "/admin", reason::kPathNotAllowed},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.host);
    Decision strict = e->decide("strict", req(c.host, 443, c.method, c.path));
    EXPECT_EQ(strict.verdict, Verdict::kDeny);
    Decision d = e->decide("learner", req(c.host, 443, c.method, c.path));
    EXPECT_EQ(d.verdict, Verdict::kLearn);
    EXPECT_EQ(d.reason, c.reason);
    EXPECT_TRUE(d.credential.empty());
    EXPECT_EQ(d.matched, nullptr);
    EXPECT_EQ(verdictName(d.verdict), "learn");
  }
  // A tunnel is intercepted so that deny rules with methods judge each request.
  EXPECT_TRUE(e->decide("learner", req("unknown.test")).intercept);
  // What a rule admits is decided as ever, with its credential.
  Decision ok = e->decide("learner", req("api.test", 443, "GET", "/v1/a"));
  EXPECT_EQ(ok.verdict, Verdict::kAllow);
  EXPECT_EQ(ok.credential, "api");
}

TEST(LearnMode, GuardrailsStillRefuse) {
  auto e = engine();
  struct Case {
    const char* host;
    const char* method;
    const char* path;
    std::string_view reason;
  } cases[] = {
      {"blocked.test", nullptr, nullptr, reason::kDeniedByRule},
      {"ro.test", "DELETE", "/x", reason::kDeniedByRule},
      {"gdeny.test", nullptr, nullptr, reason::kGlobalDeny},
      {"169.254.169.254", nullptr, nullptr, reason::kAddressDenied},
      {"127.0.0.1", "GET", "/", reason::kAddressDenied},
      {"10.0.0.1", nullptr, nullptr, reason::kAddressDenied},
      {"2130706433", nullptr, nullptr, reason::kAddressDenied},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.host);
    Decision d = e->decide("learner", req(c.host, 443, c.method, c.path));
    EXPECT_EQ(d.verdict, Verdict::kDeny);
    EXPECT_EQ(d.reason, c.reason);
  }
  // Ambiguous paths where a rule has paths stay refused.
  Decision amb = e->decide("learner", req("api.test", 443, "GET", "/v1/../admin"));
  EXPECT_EQ(amb.verdict, Verdict::kDeny);
  EXPECT_EQ(amb.reason, reason::kPathAmbiguous);
}

TEST(LearnMode, ResolvedAddressesInDeniedRangesAreRefusedUnlessPinnedAndNeverMetadata) {
  auto e = engine();
  // DNS put an unpinned name into private, loopback or metadata ranges: refused.
  Decision d = e->decide("learner", req("unknown.test"));
  ASSERT_EQ(d.verdict, Verdict::kLearn);
  for (const char* a : {"10.0.0.1", "127.0.0.1", "169.254.169.254", "::ffff:10.0.0.1"}) {
    SCOPED_TRACE(a);
    Decision c = e->checkAddress(d, *parseIp(a));
    EXPECT_EQ(c.verdict, Verdict::kDeny);
    EXPECT_EQ(c.reason, reason::kAddressDenied);
  }
  EXPECT_EQ(e->checkAddress(d, *parseIp("93.184.216.34")).verdict, Verdict::kLearn);
  // A name the operator pinned may be dialled where it was pinned ...
  Decision pinned = e->decide("learner", req("pinned.test"));
  ASSERT_EQ(pinned.verdict, Verdict::kLearn);
  EXPECT_EQ(e->checkAddress(pinned, *parseIp("10.1.2.3")).verdict, Verdict::kLearn);
  // ... but a metadata address never, pinned or not.
  Decision meta = e->decide("learner", req("meta.test"));
  Decision c = e->checkAddress(meta, *parseIp("169.254.169.254"));
  EXPECT_EQ(c.verdict, Verdict::kDeny);
  EXPECT_EQ(c.reason, reason::kAddressDenied);
  // The strict task gets no such exemption.
  EXPECT_EQ(e->decide("strict", req("pinned.test")).verdict, Verdict::kDeny);
}

}  // namespace
}  // namespace sandgate::policy
