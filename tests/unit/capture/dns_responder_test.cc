// Tests for capture/dns_responder.cc: what each kind of query gets back.
#include "capture/dns_responder.h"

#include <gtest/gtest.h>

#include "tests/unit/capture/dns_test_util.h"

namespace sandgate::capture {
namespace {

using testing::query;

DnsResponder responder(std::shared_ptr<SyntheticPool> pool, bool v6 = true) {
  return DnsResponder(
      std::move(pool), [](const std::string& n) { return n == "api.test" || n == "web.test"; }, v6);
}

uint8_t rcode(const std::vector<uint8_t>& r) { return r.size() >= 4 ? r[3] & 0x0F : 0xFF; }
uint16_t answers(const std::vector<uint8_t>& r) { return static_cast<uint16_t>(r[6] << 8 | r[7]); }

TEST(DnsResponder, Answers) {
  auto pool = std::make_shared<SyntheticPool>(defaultPoolV4(), defaultPoolV6());
  auto r = responder(pool);
  struct Case {
    const char* label;
    std::vector<uint8_t> q;
    std::string_view result;
    uint8_t rcode;
    uint16_t answers;
    std::string address;
  } cases[] = {
      {"a", query("api.test", dns::kTypeA), dns_result::kAnswered, 0, 1, "198.18.0.1"},
      {"a_again_same", query("API.test.", dns::kTypeA), dns_result::kAnswered, 0, 1, "198.18.0.1"},
      {"aaaa", query("api.test", dns::kTypeAaaa, true), dns_result::kAnswered, 0, 1,
       "fd53:4744:4e53::1"},
      {"second_name", query("web.test", dns::kTypeA), dns_result::kAnswered, 0, 1, "198.18.0.2"},
      {"https_rr", query("api.test", dns::kTypeHttps), dns_result::kNoData, 0, 0, ""},
      {"mx", query("api.test", 15), dns_result::kRefused, dns::kRcodeRefused, 0, ""},
      {"any", query("api.test", 255), dns_result::kRefused, dns::kRcodeRefused, 0, ""},
      {"chaos", query("api.test", dns::kTypeA, false, 1, 3), dns_result::kRefused,
       dns::kRcodeRefused, 0, ""},
      {"denied", query("evil.test", dns::kTypeA), dns_result::kNxDomain, dns::kRcodeNxDomain, 0,
       ""},
      {"denied_aaaa", query("evil.test", dns::kTypeAaaa), dns_result::kNxDomain,
       dns::kRcodeNxDomain, 0, ""},
      {"reverse", query("1.0.18.198.in-addr.arpa", dns::kTypePtr), dns_result::kNxDomain,
       dns::kRcodeNxDomain, 0, ""},
      {"root", query("", dns::kTypeA), dns_result::kNxDomain, dns::kRcodeNxDomain, 0, ""},
  };
  for (const auto& c : cases) {
    auto out = r.answer(c.q, false);
    EXPECT_EQ(out.result, c.result) << c.label;
    ASSERT_FALSE(out.response.empty()) << c.label;
    EXPECT_EQ(rcode(out.response), c.rcode) << c.label;
    EXPECT_EQ(answers(out.response), c.answers) << c.label;
    EXPECT_EQ(out.address, c.address) << c.label;
    EXPECT_EQ(out.response[0], c.q[0]) << c.label;  // id echoed
    EXPECT_EQ(out.response[1], c.q[1]) << c.label;
  }
  EXPECT_EQ(pool->size(), 2u);  // denied names take no address
}

TEST(DnsResponder, NotImpForOtherOpcodes) {
  auto r = responder(std::make_shared<SyntheticPool>(defaultPoolV4(), defaultPoolV6()));
  auto q = query("api.test", dns::kTypeA);
  q[2] |= 0x20;  // opcode 4 (NOTIFY)
  auto out = r.answer(q, false);
  EXPECT_EQ(out.result, dns_result::kNotImp);
  EXPECT_EQ(rcode(out.response), dns::kRcodeNotImp);
}

TEST(DnsResponder, NoIpv6MeansNoData) {
  auto r = responder(std::make_shared<SyntheticPool>(defaultPoolV4(), defaultPoolV6()), false);
  auto out = r.answer(query("api.test", dns::kTypeAaaa), false);
  EXPECT_EQ(out.result, dns_result::kNoData);
  EXPECT_EQ(answers(out.response), 0);
}

TEST(DnsResponder, MalformedIsDroppedWithAReason) {
  auto r = responder(std::make_shared<SyntheticPool>(defaultPoolV4(), defaultPoolV6()));
  auto q = query("api.test", dns::kTypeA);
  q.resize(q.size() - 1);
  auto out = r.answer(q, false);
  EXPECT_EQ(out.result, dns_result::kMalformed);
  EXPECT_TRUE(out.response.empty());
  EXPECT_EQ(out.error, ParseError::kTruncated);
}

TEST(DnsResponder, ExhaustedPoolIsServFail) {
  auto pool = std::make_shared<SyntheticPool>(*policy::parseCidr("198.18.0.0/30"), defaultPoolV6());
  DnsResponder r(
      pool, [](const std::string&) { return true; }, true);
  EXPECT_EQ(r.answer(query("a.test", dns::kTypeA), false).result, dns_result::kAnswered);
  EXPECT_EQ(r.answer(query("b.test", dns::kTypeA), false).result, dns_result::kAnswered);
  auto out = r.answer(query("c.test", dns::kTypeA), false);
  EXPECT_EQ(out.result, dns_result::kPoolExhausted);
  EXPECT_EQ(rcode(out.response), dns::kRcodeServFail);
}

}  // namespace
}  // namespace sandgate::capture
