// Refusal responses (proxy/client/refusal.h): status line, reason header, JSON body, 407 challenge.
#include "proxy/client/refusal.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <map>
#include <span>
#include <string_view>
#include <vector>

#include "broker/store.h"
#include "policy/engine.h"
#include "policy/git_rules.h"
#include "proxy/client/decision_reasons.h"

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

TEST(Refusal, ABudgetThatRefillsLaterTellsSdksNotToRetry) {
  // SDKs wait out Retry-After before retrying: hours for a day budget.
  Refusal r{.status = 429, .reason = reason::kBudgetExceeded, .retryAfter = 3600};
  EXPECT_NE(renderRefusal(r).find("\r\nX-Should-Retry: false\r\n"), std::string::npos);
  r.retryAfter = 0;  // a run budget never refills
  EXPECT_NE(renderRefusal(r).find("\r\nX-Should-Retry: false\r\n"), std::string::npos);
  r.retryAfter = 42;  // a minute budget: worth the wait
  EXPECT_EQ(renderRefusal(r).find("X-Should-Retry"), std::string::npos);
  Refusal other{.status = 429, .reason = reason::kTunnelLimit};
  EXPECT_EQ(renderRefusal(other).find("X-Should-Retry"), std::string::npos);
}

TEST(Refusal, ABudgetRefusalCarriesRetryAfterAndTheBudget) {
  Refusal budget{.status = 429,
                 .reason = reason::kBudgetExceeded,
                 .retryAfter = 42,
                 .budget = BudgetAudit{"daily", "day", "requests", 5, 5}};
  auto r = renderRefusal(budget);
  EXPECT_NE(r.find("\r\nRetry-After: 42\r\n"), std::string::npos);
  auto b = body(r).at("budget").as_object();
  EXPECT_EQ(b.at("name"), "daily");
  EXPECT_EQ(b.at("used").to_number<int64_t>(), 5);
  // No Retry-After for a budget that does not refill; a body of the API's own replaces ours.
  budget.retryAfter = 0;
  budget.body = R"({"error":{"message":"m"}})";
  r = renderRefusal(budget);
  EXPECT_EQ(r.find("Retry-After"), std::string::npos);
  EXPECT_EQ(body(r).at("error").as_object().at("message"), "m");
  auto cl = r.find("Content-Length: ");
  EXPECT_EQ(std::stoul(r.substr(cl + 16)), r.size() - r.find("\r\n\r\n") - 4);
}

// Every reason of every catalogue gets a non-empty hint in the body, even from a refusal that
// brings none of its own (#39): a client always reads a next step.
TEST(Refusal, EveryReasonHasAHint) {
  std::vector<std::string_view> tokens;
  for (const auto& info : requestReasons()) tokens.push_back(info.token);
  for (const auto& info : kDecisionReasons) tokens.push_back(info.token);
  for (const auto& info : policy::kGitReasons) tokens.push_back(info.token);
  ASSERT_GT(tokens.size(), 60u);
  for (auto token : tokens) {
    auto b = body(renderRefusal({.status = 403, .reason = token}));
    EXPECT_EQ(b.at("reason").as_string(), token);
    EXPECT_FALSE(b.at("hint").as_string().empty()) << token;
  }
  // A refusal's own hint (more precise) is kept.
  auto own = body(renderRefusal({.status = 429, .reason = reason::kTunnelLimit, .hint = "mine"}));
  EXPECT_EQ(own.at("hint").as_string(), "mine");
}

// One status per token (#39): the request path's, the policy's, the broker's and task tokens'
// tokens are each catalogued once, and reasonStatus() (which every refusal is sent with) gives
// the catalogued status. method_not_allowed was 403 from the policy and 405 for TRACE.
TEST(Refusal, EachReasonHasOneStatus) {
  std::map<std::string_view, int> seen;
  for (auto catalogue : {requestReasons(), std::span<const ReasonInfo>(kDecisionReasons)}) {
    for (const auto& info : catalogue) {
      EXPECT_TRUE(seen.emplace(info.token, info.status).second) << info.token;
      EXPECT_EQ(reasonStatus(info.token), info.status) << info.token;
    }
  }
  EXPECT_EQ(seen.at(policy::reason::kMethodNotAllowed), 403);
  EXPECT_EQ(seen.at(reason::kTraceWithCredential), 405);
  EXPECT_EQ(seen.at(token_reason::kExpired), 407);
  EXPECT_EQ(reasonStatus("no_such_reason"), -1);
  EXPECT_EQ(seen.count(policy::reason::kAllowed), 0u);  // not a refusal
}

}  // namespace
}  // namespace sandgate::proxy
