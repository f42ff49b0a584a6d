// Tests for capture/dns_message.cc: well-formed queries, EDNS, answers, and malformed input
// (truncation at every length, pointer loops, huge counts, random bytes) that must never crash.
#include "capture/dns_message.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/unit/capture/dns_test_util.h"

namespace sandgate::capture {
namespace {

using testing::put16;
using testing::query;

TEST(DnsMessage, ParsesAQuery) {
  auto m = query("API.Test", dns::kTypeA);
  ParseError err;
  auto q = parseQuery(m, &err);
  ASSERT_TRUE(q) << parseErrorName(err);
  EXPECT_EQ(q->header.id, 0x1234);
  EXPECT_TRUE(q->header.recursionDesired);
  EXPECT_EQ(q->question.name, "api.test");  // lower-cased
  EXPECT_EQ(q->question.type, dns::kTypeA);
  EXPECT_FALSE(q->edns);
}

TEST(DnsMessage, ToleratesEdns) {
  auto m = query("api.test", dns::kTypeAaaa, true);
  ParseError err;
  auto q = parseQuery(m, &err);
  ASSERT_TRUE(q) << parseErrorName(err);
  EXPECT_TRUE(q->edns);
  EXPECT_EQ(q->ednsUdpSize, 4096);
}

TEST(DnsMessage, BuildsAnAnswerThatParsesBack) {
  auto m = query("api.test", dns::kTypeA, true);
  ParseError err;
  auto q = parseQuery(m, &err);
  ASSERT_TRUE(q);
  auto r = buildResponse(*q, dns::kRcodeNoError, {{dns::kTypeA, 300, {198, 18, 0, 1}}}, 512);
  auto h = parseHeader(r);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->id, 0x1234);
  EXPECT_TRUE(h->response);
  EXPECT_EQ(h->qdCount, 1);
  EXPECT_EQ(h->anCount, 1);
  EXPECT_EQ(h->arCount, 1);   // OPT echoed
  EXPECT_EQ(r[3] & 0x0F, 0);  // NOERROR
  EXPECT_EQ(r[2] & 0x01, 1);  // RD copied
  // header + question (10 + 4) + answer (2 + 10 + 4) + OPT (11)
  EXPECT_EQ(r.size(), 12u + 14 + 16 + 11);
  EXPECT_EQ(std::vector<uint8_t>(r.end() - 15, r.end() - 11),
            (std::vector<uint8_t>{198, 18, 0, 1}));
}

TEST(DnsMessage, TruncatesAnswersThatDoNotFit) {
  auto m = query("api.test", dns::kTypeA);
  ParseError err;
  auto q = parseQuery(m, &err);
  ASSERT_TRUE(q);
  std::vector<DnsAnswer> many(40, DnsAnswer{dns::kTypeA, 1, {1, 2, 3, 4}});
  auto r = buildResponse(*q, dns::kRcodeNoError, many, 512);
  EXPECT_LE(r.size(), 512u);
  EXPECT_EQ(r[2] & 0x02, 0x02);  // TC
}

struct BadCase {
  const char* name;
  std::vector<uint8_t> bytes;
  ParseError expected;
};

std::vector<uint8_t> header(uint16_t qd, uint16_t an, uint16_t ns, uint16_t ar,
                            uint8_t flags = 0x01) {
  std::vector<uint8_t> m;
  put16(m, 7);
  m.push_back(flags);
  m.push_back(0);
  put16(m, qd);
  put16(m, an);
  put16(m, ns);
  put16(m, ar);
  return m;
}

std::vector<uint8_t> concat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(DnsMessage, RefusesMalformed) {
  std::vector<uint8_t> longLabel = {64};
  longLabel.resize(65, 'a');
  std::vector<uint8_t> longName;
  for (int i = 0; i < 5; ++i) {
    longName.push_back(63);
    longName.resize(longName.size() + 63, 'a');
  }
  longName.push_back(0);
  const std::vector<uint8_t> tail = {0, 1, 0, 1};
  std::vector<BadCase> cases = {
      {"empty", {}, ParseError::kTruncated},
      {"short_header", {1, 2, 3}, ParseError::kTruncated},
      {"response", concat(header(1, 0, 0, 0, 0x81), concat({0}, tail)), ParseError::kIsResponse},
      {"no_question", header(0, 0, 0, 0), ParseError::kBadCounts},
      {"two_questions", header(2, 0, 0, 0), ParseError::kBadCounts},
      {"huge_counts", header(65535, 65535, 65535, 65535), ParseError::kBadCounts},
      {"answers_in_query", header(1, 1, 0, 0), ParseError::kBadCounts},
      {"two_additional", header(1, 0, 0, 2), ParseError::kBadCounts},
      {"name_cut", concat(header(1, 0, 0, 0), {3, 'a', 'p'}), ParseError::kTruncated},
      {"no_type", concat(header(1, 0, 0, 0), {1, 'a', 0, 0}), ParseError::kTruncated},
      {"label_64", concat(header(1, 0, 0, 0), concat(longLabel, concat({0}, tail))),
       ParseError::kBadName},
      {"name_over_255", concat(header(1, 0, 0, 0), concat(longName, tail)), ParseError::kBadName},
      {"pointer_to_self", concat(header(1, 0, 0, 0), concat({0xC0, 12}, tail)),
       ParseError::kPointerLoop},
      {"pointer_forward", concat(header(1, 0, 0, 0), concat({0xC0, 20}, tail)),
       ParseError::kPointerLoop},
      {"pointer_into_header_loop",
       // 1 'a' then a pointer back to offset 12 (its own label): a loop through a label.
       concat(header(1, 0, 0, 0), concat({1, 'a', 0xC0, 12}, tail)), ParseError::kPointerLoop},
      {"pointer_cut", concat(header(1, 0, 0, 0), {0xC0}), ParseError::kTruncated},
      {"reserved_label_type", concat(header(1, 0, 0, 0), concat({0x40, 0}, tail)),
       ParseError::kBadName},
      {"non_ascii", concat(header(1, 0, 0, 0), concat({1, 0xE9, 0}, tail)), ParseError::kBadName},
      {"dot_in_label", concat(header(1, 0, 0, 0), concat({3, 'a', '.', 'b', 0}, tail)),
       ParseError::kBadName},
      {"trailing_bytes", concat(query("a.test", dns::kTypeA), {0}), ParseError::kTrailingBytes},
      {"additional_not_opt",
       concat(header(1, 0, 0, 1),
              concat(concat({1, 'a', 0}, tail), {0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0})),
       ParseError::kBadAdditional},
      {"opt_rdata_cut",
       concat(header(1, 0, 0, 1),
              concat(concat({1, 'a', 0}, tail), {0, 0, 41, 16, 0, 0, 0, 0, 0, 0, 9})),
       ParseError::kTruncated},
  };
  for (const auto& c : cases) {
    ParseError err = ParseError::kNone;
    auto q = parseQuery(c.bytes, &err);
    EXPECT_FALSE(q) << c.name;
    EXPECT_EQ(parseErrorName(err), parseErrorName(c.expected)) << c.name;
  }
}

TEST(DnsMessage, PointerChainWithinLimitParses) {
  // Additional OPT owner written as a pointer to the root byte of the question's name.
  auto m = header(1, 0, 0, 1);
  m = concat(m, {1, 'a', 0, 0, 1, 0, 1});
  m = concat(m, {0xC0, 14, 0, 41, 2, 0, 0, 0, 0, 0, 0, 0});
  ParseError err;
  auto q = parseQuery(m, &err);
  ASSERT_TRUE(q) << parseErrorName(err);
  EXPECT_TRUE(q->edns);
}

TEST(DnsMessage, EveryTruncationOfAValidQueryIsRefused) {
  auto m = query("www.example.test", dns::kTypeAaaa, true);
  for (size_t n = 0; n < m.size(); ++n) {
    ParseError err;
    std::span<const uint8_t> part(m.data(), n);
    EXPECT_FALSE(parseQuery(part, &err)) << "length " << n;
    EXPECT_NE(err, ParseError::kNone);
  }
}

TEST(DnsMessage, RandomAndMutatedBytesNeverCrash) {
  std::mt19937 rng(42);
  auto base = query("www.example.test", dns::kTypeA, true);
  size_t parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> m;
    if (i % 2 == 0) {
      m.resize(rng() % 64);
      for (auto& b : m) b = static_cast<uint8_t>(rng());
      if (m.size() >= 12) {  // plausible header so the name parser gets exercised
        m[2] = 0x01;
        m[4] = 0, m[5] = 1, m[6] = m[7] = m[8] = m[9] = m[10] = 0, m[11] = rng() % 2;
      }
    } else {
      m = base;
      for (int k = 0; k < 3; ++k) m[rng() % m.size()] = static_cast<uint8_t>(rng());
    }
    ParseError err;
    if (parseQuery(m, &err)) ++parsed;
  }
  EXPECT_GT(parsed, 0u);  // the mutator is not so aggressive that nothing ever parses
}

}  // namespace
}  // namespace sandgate::capture
