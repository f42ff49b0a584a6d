// learn/generalise: the path trie's threshold, never `**`, methods kept per path, ports.
#include "learn/generalise.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sandgate::learn {
namespace {

using ::testing::ElementsAre;

TEST(Generalise, ASegmentBecomesStarAtTheThresholdNotBefore) {
  struct Case {
    const char* name;
    std::vector<std::string> paths;
    int threshold;
    std::vector<std::string> want;
  } cases[] = {
      {"two ids under 3 stay literal", {"/users/1", "/users/2"}, 3, {"/users/1", "/users/2"}},
      {"three ids become *", {"/users/1", "/users/2", "/users/3"}, 3, {"/users/*"}},
      {"repeats are one value",
       {"/users/1", "/users/1", "/users/1", "/users/2"},
       3,
       {"/users/1", "/users/2"}},
      {"--generalise 2", {"/users/1", "/users/2"}, 2, {"/users/*"}},
      {"--generalise 5 keeps four",
       {"/a/1", "/a/2", "/a/3", "/a/4"},
       5,
       {"/a/1", "/a/2", "/a/3", "/a/4"}},
      {"varying middle, fixed tail", {"/r/1/files", "/r/2/files", "/r/3/files"}, 3, {"/r/*/files"}},
      {"tails kept apart after a star", {"/r/1/a", "/r/2/b", "/r/3/a"}, 3, {"/r/*/a", "/r/*/b"}},
      {"prefixes decide separately", {"/a/1", "/a/2", "/a/3", "/b/1"}, 3, {"/a/*", "/b/1"}},
      {"depths never merge", {"/a", "/a/b", "/a/b/c"}, 3, {"/a", "/a/b", "/a/b/c"}},
      {"root", {"/"}, 3, {"/"}},
      {"a trailing slash stays literal", {"/d/", "/d/x", "/d/y"}, 3, {"/d/", "/d/x", "/d/y"}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(generalisePaths(c.paths, c.threshold), c.want) << c.name;
  }
}

TEST(Generalise, NeverDoubleStarWhateverTheInput) {
  std::vector<std::string> paths;
  for (int i = 0; i < 50; ++i) {
    paths.push_back("/" + std::to_string(i) + "/" + std::to_string(i * 7) + "/x");
    paths.push_back("/" + std::to_string(i));
  }
  for (const auto& p : generalisePaths(paths, 2)) {
    EXPECT_EQ(p.find("**"), std::string::npos) << p;
  }
  EXPECT_THAT(generalisePaths(paths, 2), ElementsAre("/*", "/*/*/x"));
}

TEST(Generalise, PatternCoversOneSegmentPerStar) {
  EXPECT_TRUE(patternCovers("/users/*", "/users/7"));
  EXPECT_FALSE(patternCovers("/users/*", "/users/7/keys"));
  EXPECT_FALSE(patternCovers("/users/*", "/users/"));
  EXPECT_FALSE(patternCovers("/users/*", "/admin/7"));
}

Observation visible(int line, std::string method, std::string path, uint16_t port = 443,
                    std::string host = "api.test") {
  Observation o;
  o.file = "a";
  o.line = line;
  o.kind = "intercept";
  o.task = "demo";
  o.host = std::move(host);
  o.port = port;
  o.method = std::move(method);
  o.path = std::move(path);
  o.allowed = true;
  return o;
}

TEST(Generalise, MethodsStayWithThePathsTheyWereSeenOn) {
  std::vector<Observation> seen = {visible(1, "GET", "/items/1"), visible(2, "GET", "/items/2"),
                                   visible(3, "GET", "/items/3"), visible(4, "DELETE", "/items/2")};
  Draft d = draftRules(seen, 3);
  ASSERT_EQ(d.tasks.size(), 1u);
  const auto& rules = d.tasks[0].rules;
  ASSERT_EQ(rules.size(), 2u);
  // DELETE was seen on one item: it is not allowed on every item.
  EXPECT_THAT(rules[0].methods, ElementsAre("DELETE"));
  EXPECT_THAT(rules[0].paths, ElementsAre("/items/2"));
  EXPECT_THAT(rules[1].methods, ElementsAre("GET"));
  EXPECT_THAT(rules[1].paths, ElementsAre("/items/*"));
  EXPECT_EQ(rules[1].covers.size(), 3u);
}

TEST(Generalise, PortsAsSeenAndTunnelsGiveHostAndPortOnly) {
  Observation tunnel;
  tunnel.kind = "tunnel";
  tunnel.task = "demo";
  tunnel.host = "pkg.test";
  tunnel.port = 8443;
  tunnel.allowed = true;
  std::vector<Observation> seen = {visible(1, "GET", "/a", 443), visible(2, "GET", "/a", 8080),
                                   tunnel};
  Draft d = draftRules(seen, 3);
  const auto& rules = d.tasks[0].rules;
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0].host, "api.test");
  EXPECT_THAT(rules[0].ports, ElementsAre(443, 8080));
  EXPECT_EQ(rules[1].host, "pkg.test");
  EXPECT_THAT(rules[1].ports, ElementsAre(8443));
  EXPECT_TRUE(rules[1].methods.empty());
  EXPECT_TRUE(rules[1].paths.empty());
}

TEST(Generalise, CidrsOnlyForAnUpstreamInADeniedRange) {
  auto pub = visible(1, "GET", "/a", 443, "pub.test");
  pub.upstream = "93.184.216.34:443";
  auto local = visible(2, "GET", "/a", 80, "local.test");
  local.upstream = "127.0.0.1:4567";
  Draft d = draftRules({pub, local}, 3);
  const auto& rules = d.tasks[0].rules;
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_THAT(rules[0].cidrs, ElementsAre("127.0.0.1/32"));  // local.test sorts first
  EXPECT_TRUE(rules[1].cidrs.empty());
  EXPECT_EQ(d.resolve.at("local.test"), "127.0.0.1:4567");
  EXPECT_FALSE(d.resolve.contains("pub.test"));
}

TEST(Generalise, AnAddressRefusalGetsNoCidrsAndANote) {
  auto refused = visible(1, "GET", "/a", 80, "inside.test");
  refused.allowed = false;
  refused.reason = "address_denied";
  Draft d = draftRules({refused}, 3);
  ASSERT_EQ(d.tasks[0].rules.size(), 1u);
  EXPECT_TRUE(d.tasks[0].rules[0].cidrs.empty());
  EXPECT_TRUE(d.resolve.empty());
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_NE(d.notes[0].find("address_denied"), std::string::npos);
}

TEST(Generalise, APathNotInNormalFormDropsPathRulesForItsHost) {
  Draft d = draftRules({visible(1, "GET", "/a/../b"), visible(2, "GET", "/c")}, 3);
  const auto& rules = d.tasks[0].rules;
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_TRUE(rules[0].paths.empty());
  EXPECT_THAT(rules[0].methods, ElementsAre("GET"));
  EXPECT_EQ(d.notes.size(), 1u);
}

}  // namespace
}  // namespace sandgate::learn
