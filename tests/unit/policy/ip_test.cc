// Tests for policy/ip.cc: every inet_aton spelling, IPv6 text, printing and CIDRs.
#include "policy/ip.h"

#include <gtest/gtest.h>

namespace sandgate::policy {
namespace {

struct V4Case {
  const char* name;
  const char* input;
  const char* want;  // canonical dotted quad, or nullptr when the input must be refused
};

TEST(PolicyIpv4Loose, Table) {
  const V4Case cases[] = {
      {"dotted", "127.0.0.1", "127.0.0.1"},
      {"decimal_32bit", "2130706433", "127.0.0.1"},
      {"hex_32bit", "0x7f000001", "127.0.0.1"},
      {"hex_upper_x", "0X7F000001", "127.0.0.1"},
      {"octal_first_part", "0177.0.0.1", "127.0.0.1"},
      {"two_parts", "127.1", "127.0.0.1"},
      {"hex_two_parts", "0x7f.1", "127.0.0.1"},
      {"three_parts", "10.1.258", "10.1.1.2"},
      {"octal_all", "0300.0250.0.01", "192.168.0.1"},
      {"zero", "0", "0.0.0.0"},
      {"max", "4294967295", "255.255.255.255"},
      {"long_hex_leading_zeros", "0x00000000007f.1", "127.0.0.1"},
      {"mixed_bases", "0xa.010.0x0.1", "10.8.0.1"},
      {"overflow_32bit", "4294967296", nullptr},
      {"overflow_hex", "0x100000000", nullptr},
      {"part_over_255", "256.0.0.1", nullptr},
      {"last_part_too_big_3", "1.2.65536", nullptr},
      {"last_part_too_big_2", "1.16777216", nullptr},
      {"last_part_too_big_4", "1.2.3.256", nullptr},
      {"bad_octal_digit", "08.0.0.1", nullptr},
      {"bad_octal_digit_9", "0179", nullptr},
      {"hex_without_digits", "0x", nullptr},
      {"hex_bad_digit", "0x1g", nullptr},
      {"five_parts", "1.2.3.4.5", nullptr},
      {"empty", "", nullptr},
      {"empty_part", "1..2", nullptr},
      {"leading_dot", ".1", nullptr},
      {"trailing_dot", "1.2.3.4.", nullptr},
      {"trailing_space", "127.0.0.1 ", nullptr},
      {"leading_space", " 127.0.0.1", nullptr},
      {"sign", "+1", nullptr},
      {"letters", "a.b.c.d", nullptr},
      {"name", "example.com", nullptr},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto a = parseIpv4Loose(c.input);
    if (!c.want) {
      EXPECT_FALSE(a.has_value()) << a->str();
      continue;
    }
    ASSERT_TRUE(a.has_value());
    EXPECT_FALSE(a->v6);
    EXPECT_EQ(a->str(), c.want);
  }
}

struct V6Case {
  const char* name;
  const char* input;
  const char* want;  // canonical (RFC 5952) text, or nullptr when refused
};

TEST(PolicyIpv6, Table) {
  const V6Case cases[] = {
      {"loopback", "::1", "::1"},
      {"unspecified", "::", "::"},
      {"full", "2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"},
      {"upper_case", "2001:DB8::A", "2001:db8::a"},
      {"trailing_gap", "fe80::", "fe80::"},
      {"middle_gap", "1:2::7:8", "1:2::7:8"},
      {"longest_run_compressed", "1:0:0:2:0:0:0:3", "1:0:0:2::3"},
      {"first_run_wins_tie", "1:0:0:2:3:0:0:4", "1::2:3:0:0:4"},
      {"single_zero_not_compressed", "1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"},
      {"mapped_dotted", "::ffff:127.0.0.1", "::ffff:127.0.0.1"},
      {"mapped_hex", "::ffff:7f00:1", "::ffff:127.0.0.1"},
      {"compat_dotted", "::10.0.0.1", "::a00:1"},
      {"nat64_dotted", "64:ff9b::192.0.2.1", "64:ff9b::c000:201"},
      {"eight_groups_with_v4", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304"},
      {"too_many_groups", "1:2:3:4:5:6:7:8:9", nullptr},
      {"gap_with_eight_groups", "1:2:3:4::5:6:7:8", nullptr},
      {"seven_groups_no_gap", "1:2:3:4:5:6:7", nullptr},
      {"two_gaps", "1::2::3", nullptr},
      {"triple_colon", ":::", nullptr},
      {"leading_single_colon", ":1::2", nullptr},
      {"trailing_single_colon", "1::2:", nullptr},
      {"group_too_long", "12345::", nullptr},
      {"bad_hex", "g::1", nullptr},
      {"zone_id", "fe80::1%eth0", nullptr},
      {"brackets", "[::1]", nullptr},
      {"v4_not_last", "::1.2.3.4:1", nullptr},
      {"v4_leading_zero", "::ffff:127.0.0.01", nullptr},
      {"v4_short", "::ffff:127.1", nullptr},
      {"v4_too_many_groups", "1:2:3:4:5:6:7:1.2.3.4", nullptr},
      {"empty", "", nullptr},
      {"ipv4", "127.0.0.1", nullptr},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto a = parseIpv6(c.input);
    if (!c.want) {
      EXPECT_FALSE(a.has_value()) << a->str();
      continue;
    }
    ASSERT_TRUE(a.has_value());
    EXPECT_TRUE(a->v6);
    EXPECT_EQ(a->str(), c.want);
  }
}

TEST(PolicyIp, ParseIpPrefersV4ThenV6) {
  EXPECT_FALSE(parseIp("2130706433")->v6);
  EXPECT_TRUE(parseIp("::1")->v6);
  EXPECT_FALSE(parseIp("example.com").has_value());
}

TEST(PolicyIp, V4ValueRoundTrip) {
  IpAddress a = IpAddress::v4(0x7f000001);
  EXPECT_EQ(a.v4Value(), 0x7f000001u);
  EXPECT_EQ(a.bytes[0], 127);
  EXPECT_EQ(a.bytes[3], 1);
  EXPECT_EQ(a, *parseIpv4Loose("127.0.0.1"));
  EXPECT_NE(a, *parseIpv6("::ffff:127.0.0.1"));  // different families are different values
}

struct CidrCase {
  const char* name;
  const char* input;
  const char* want;   // canonical text, or nullptr when refused
  const char* error;  // expected substring of the error
};

TEST(PolicyCidr, Parse) {
  const CidrCase cases[] = {
      {"v4_range", "10.0.0.0/8", "10.0.0.0/8", nullptr},
      {"v4_single", "127.0.0.1", "127.0.0.1/32", nullptr},
      {"v4_zero", "0.0.0.0/0", "0.0.0.0/0", nullptr},
      {"v6_range", "fc00::/7", "fc00::/7", nullptr},
      {"v6_single", "::1", "::1/128", nullptr},
      {"host_bits", "10.0.0.1/8", nullptr, "did you mean 10.0.0.0/8?"},
      {"v6_host_bits", "fe80::1/10", nullptr, "did you mean fe80::/10?"},
      {"prefix_too_big", "10.0.0.0/33", nullptr, "exceeds 32"},
      {"v6_prefix_too_big", "::/129", nullptr, "exceeds 128"},
      {"prefix_leading_zero", "10.0.0.0/08", nullptr, "invalid prefix"},
      {"prefix_empty", "10.0.0.0/", nullptr, "invalid prefix"},
      {"prefix_letters", "10.0.0.0/a", nullptr, "invalid prefix"},
      {"loose_v4_refused", "2130706433/32", nullptr, "expected an IPv4 dotted quad"},
      {"short_v4_refused", "127.1/32", nullptr, "expected an IPv4 dotted quad"},
      {"octal_v4_refused", "010.0.0.0/8", nullptr, "expected an IPv4 dotted quad"},
      {"name", "example.com/24", nullptr, "expected an IPv4 dotted quad"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string err;
    auto cidr = parseCidr(c.input, &err);
    if (!c.want) {
      EXPECT_FALSE(cidr.has_value());
      EXPECT_NE(err.find(c.error), std::string::npos) << err;
      continue;
    }
    ASSERT_TRUE(cidr.has_value()) << err;
    EXPECT_EQ(cidr->str(), c.want);
  }
}

TEST(PolicyCidr, Contains) {
  struct Case {
    const char* name;
    const char* cidr;
    const char* addr;
    bool in;
  };
  const Case cases[] = {
      {"v4_in", "10.0.0.0/8", "10.255.1.2", true},
      {"v4_out", "10.0.0.0/8", "11.0.0.0", false},
      {"v4_odd_prefix_in", "100.64.0.0/10", "100.127.255.255", true},
      {"v4_odd_prefix_out", "100.64.0.0/10", "100.128.0.0", false},
      {"v4_slash32", "127.0.0.1", "127.0.0.1", true},
      {"v4_slash32_out", "127.0.0.1", "127.0.0.2", false},
      {"v4_slash0", "0.0.0.0/0", "203.0.113.9", true},
      {"v6_in", "fc00::/7", "fd12::1", true},
      {"v6_out", "fc00::/7", "fe00::1", false},
      {"family_mismatch_v4_in_v6", "::/0", "1.2.3.4", false},
      {"family_mismatch_mapped", "127.0.0.0/8", "::ffff:127.0.0.1", false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto cidr = parseCidr(c.cidr);
    ASSERT_TRUE(cidr.has_value());
    auto a = parseIp(c.addr);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(cidr->contains(*a), c.in);
  }
}

}  // namespace
}  // namespace sandgate::policy
