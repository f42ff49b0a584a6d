// Refusal responses (proxy/client/refusal.h): status line, reason header, JSON body, 407 challenge.
#include "proxy/client/refusal.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace sandgate::proxy {
namespace {

boost::json::object body(const std::string& response) {
  auto sep = response.find("\r\n\r\n");
  return boost::json::parse(response.substr(sep + 4)).as_object();
}

TEST(Refusal, ForbiddenCarriesReasonAndJson) {
  auto r = renderRefusal(
      {403, "no_matching_rule", "demo", "evil.test", "", "no rule allows evil.test", "ask"});
  EXPECT_EQ(r.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u);
  EXPECT_NE(r.find("\r\nX-Sandgate-Reason: no_matching_rule\r\n"), std::string::npos);
  EXPECT_NE(r.find("\r\nConnection: close\r\n"), std::string::npos);
  EXPECT_EQ(r.find("Proxy-Authenticate"), std::string::npos);
  auto b = body(r);
  EXPECT_EQ(b.at("reason").as_string(), "no_matching_rule");
  EXPECT_EQ(b.at("task").as_string(), "demo");
  EXPECT_EQ(b.at("host").as_string(), "evil.test");
  EXPECT_EQ(b.at("error").as_string(), "no rule allows evil.test");
  EXPECT_TRUE(b.contains("rule"));
  EXPECT_TRUE(b.contains("hint"));
}

TEST(Refusal, ProxyAuthChallenge) {
  auto r = renderRefusal({407, reason::kAuthRequired, "", "", "", "", ""});
  EXPECT_EQ(r.rfind("HTTP/1.1 407 Proxy Authentication Required\r\n", 0), 0u);
  EXPECT_NE(r.find("\r\nProxy-Authenticate: Basic realm=\"sandgate\"\r\n"), std::string::npos);
  EXPECT_EQ(body(r).at("error").as_string(), "Proxy Authentication Required");
}

TEST(Refusal, ContentLengthMatchesBody) {
  auto r = renderRefusal({502, reason::kUpstreamRefused, "t", "h", "", "a \"quoted\" detail", ""});
  auto sep = r.find("\r\n\r\n");
  auto cl = r.find("Content-Length: ");
  ASSERT_NE(cl, std::string::npos);
  EXPECT_EQ(std::stoul(r.substr(cl + 16)), r.size() - sep - 4);
  EXPECT_EQ(body(r).at("error").as_string(), "a \"quoted\" detail");
}

}  // namespace
}  // namespace sandgate::proxy
