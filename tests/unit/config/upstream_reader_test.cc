// Tests of upstream_proxies, upstream_proxy_default, upstream_proxy_direct and rules' `via`
// (issue #44): what loads, and each mistake with its position and message.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::Expected;
using testing::expectOne;
using testing::loadErrors;
using testing::loadOk;

TEST(UpstreamProxies, TheIssueExampleLoads) {
  auto c = loadOk(
      "credentials:\n"
      "  corp-proxy:\n"
      "    source: {file: /run/secrets/corp}\n"
      "upstream_proxies:\n"
      "  - name: corp\n"
      "    url: \"http://proxy.corp.example:3128\"\n"
      "    credential: corp-proxy\n"
      "    resolve: local\n"
      "  - name: corp-backup\n"
      "    url: \"socks5://10.1.2.3:1080\"\n"
      "  - name: tls\n"
      "    url: \"https://[fd00::1]:8443\"\n"
      "    resolve: parent\n"
      "upstream_proxy_default: [corp, corp-backup]\n"
      "upstream_proxy_direct: [\"*.internal.example\", .corp.example, 10.0.0.0/8, \"::1\"]\n"
      "policies:\n"
      "  p:\n"
      "    allow:\n"
      "      - {host: a.example, via: [corp-backup]}\n"
      "      - {host: b.example, via: direct}\n"
      "      - {host: c.example}\n"
      "tasks: [{name: t, policy: p}]\n");
  ASSERT_EQ(c.upstream.proxies.size(), 3u);
  const auto& corp = c.upstream.proxies[0];
  EXPECT_EQ(corp.name, "corp");
  EXPECT_EQ(corp.scheme, UpstreamProxy::Scheme::kHttp);
  EXPECT_EQ(corp.host, "proxy.corp.example");
  EXPECT_EQ(corp.port, 3128);
  ASSERT_TRUE(corp.credential);
  EXPECT_EQ(corp.credential->value, "corp-proxy");
  EXPECT_EQ(corp.resolve, UpstreamProxy::Resolve::kLocal);
  EXPECT_EQ(c.upstream.proxies[1].scheme, UpstreamProxy::Scheme::kSocks5);
  EXPECT_EQ(c.upstream.proxies[1].host, "10.1.2.3");
  EXPECT_EQ(c.upstream.proxies[2].scheme, UpstreamProxy::Scheme::kHttps);
  EXPECT_EQ(c.upstream.proxies[2].host, "fd00::1");
  EXPECT_EQ(c.upstream.proxies[2].resolve, UpstreamProxy::Resolve::kParent);
  ASSERT_EQ(c.upstream.defaults.size(), 2u);
  EXPECT_EQ(c.upstream.direct.size(), 4u);
  const auto& allow = c.policies.at("p").allow;
  ASSERT_TRUE(allow[0].via);
  EXPECT_EQ(allow[0].via->at(0).value, "corp-backup");
  ASSERT_TRUE(allow[1].via);
  EXPECT_TRUE(allow[1].via->empty());  // direct
  EXPECT_FALSE(allow[2].via);
  // A credential only a parent uses needs no hosts or inject.
  EXPECT_TRUE(c.credentials.at("corp-proxy").hosts.empty());
}

TEST(UpstreamProxies, Mistakes) {
  struct Case {
    const char* name;
    const char* yaml;
    Expected want;
  };
  const Case cases[] = {
      {"password in the url",
       "upstream_proxies:\n  - {name: a, url: \"http://u:pw@proxy:3128\"}\n",
       {2, 20, "upstream_proxies[0].url", "name a `credential:` instead"}},
      {"no port",
       "upstream_proxies:\n  - {name: a, url: \"http://proxy\"}\n",
       {2, 20, "upstream_proxies[0].url", "explicit port"}},
      {"unknown scheme",
       "upstream_proxies:\n  - {name: a, url: \"ftp://proxy:21\"}\n",
       {2, 20, "upstream_proxies[0].url", "unsupported scheme `ftp`"}},
      {"a path",
       "upstream_proxies:\n  - {name: a, url: \"http://proxy:3128/x\"}\n",
       {2, 20, "upstream_proxies[0].url", "no path"}},
      {"bad resolve",
       "upstream_proxies:\n  - {name: a, url: \"http://p:1\", resolve: remote}\n",
       {2, 43, "upstream_proxies[0].resolve", "expected local or parent"}},
      {"direct as a name",
       "upstream_proxies:\n  - {name: direct, url: \"http://p:1\"}\n",
       {2, 12, "upstream_proxies[0].name", "`direct` means no parent"}},
      {"duplicate name",
       "upstream_proxies:\n  - {name: a, url: \"http://p:1\"}\n  - {name: a, url: "
       "\"http://q:1\"}\n",
       {3, 12, "upstream_proxies[1].name", "already defined at line 2"}},
      {"unknown default",
       "upstream_proxies:\n  - {name: corp, url: \"http://p:1\"}\n"
       "upstream_proxy_default: [crop]\n",
       {3, 26, "upstream_proxy_default[0]", "unknown upstream proxy `crop`; defined: corp"}},
      {"unknown via",
       "upstream_proxies:\n  - {name: corp, url: \"http://p:1\"}\n"
       "policies:\n  p:\n    allow:\n      - {host: a.example, via: [nope]}\n",
       {6, 33, "policies.p.allow[0].via[0]", "unknown upstream proxy `nope`"}},
      {"via a bare name",
       "upstream_proxies:\n  - {name: corp, url: \"http://p:1\"}\n"
       "policies:\n  p:\n    allow:\n      - {host: a.example, via: corp}\n",
       {6, 32, "policies.p.allow[0].via", "expected direct or a list"}},
      {"via on a deny rule",
       "policies:\n  p:\n    deny:\n      - {host: a.example, via: direct}\n",
       {4, 27, "policies.p.deny[0].via", "a deny rule forwards nothing"}},
      {"unknown credential",
       "upstream_proxies:\n  - {name: a, url: \"http://p:1\", credential: nope}\n",
       {2, 46, "upstream_proxies[0].credential", "unknown credential `nope`"}},
      {"bad direct entry",
       "upstream_proxy_direct: [\"10.0.0.0/40\"]\n",
       {1, 25, "upstream_proxy_direct[0]", "expected a host"}},
      {"credential nobody uses without hosts",
       "credentials:\n  c:\n    source: {file: /x}\n    inject: {header: X, value: \"{secret}\"}\n",
       {2, 3, "credentials.c", "missing required key `hosts`"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expectOne(loadErrors(c.yaml), c.want);
  }
}

}  // namespace
}  // namespace sandgate::config
