// Tests for policy/host.cc: every request-host spelling, accepted or refused, and why.
#include "policy/host.h"

#include <gtest/gtest.h>

namespace sandgate::policy {
namespace {

struct Case {
  const char* name;
  std::string_view input;
  bool ok;
  bool isAddress;
  const char* want;  // normalised name / canonical address, or a substring of the error
};

TEST(PolicyNormalizeHost, Table) {
  using namespace std::string_view_literals;
  const std::string label63 = std::string(63, 'a') + ".com";
  const std::string label64 = std::string(64, 'a') + ".com";
  const Case cases[] = {
      // Names.
      {"plain", "example.com", true, false, "example.com"},
      {"upper_case", "ExAmPle.COM", true, false, "example.com"},
      {"trailing_dot", "example.com.", true, false, "example.com"},
      {"single_label", "localhost", true, false, "localhost"},
      {"digits_inside", "1password.com", true, false, "1password.com"},
      {"underscore", "_dmarc.example.com", true, false, "_dmarc.example.com"},
      {"punycode", "xn--bcher-kva.example", true, false, "xn--bcher-kva.example"},
      {"label_63", label63, true, false, label63.c_str()},
      // IPv4 in every inet_aton spelling is an address, never a name.
      {"dotted", "127.0.0.1", true, true, "127.0.0.1"},
      {"decimal", "2130706433", true, true, "127.0.0.1"},
      {"hex", "0x7f000001", true, true, "127.0.0.1"},
      {"octal", "0177.0.0.1", true, true, "127.0.0.1"},
      {"short", "127.1", true, true, "127.0.0.1"},
      {"hex_short", "0x7f.1", true, true, "127.0.0.1"},
      {"upper_hex", "0X7F.1", true, true, "127.0.0.1"},
      {"ipv4_trailing_dot", "127.0.0.1.", true, true, "127.0.0.1"},
      // Bracketed IPv6.
      {"v6_loopback", "[::1]", true, true, "::1"},
      {"v6_mapped", "[::ffff:127.0.0.1]", true, true, "::ffff:127.0.0.1"},
      {"v6_upper", "[2001:DB8::1]", true, true, "2001:db8::1"},
      {"v6_zone", "[fe80::1%25eth0]", false, false, "zone IDs are not allowed"},
      {"v6_zone_raw", "[fe80::1%eth0]", false, false, "zone IDs are not allowed"},
      {"v6_unbracketed", "::1", false, false, "must be written in brackets"},
      {"v6_unbracketed_full", "2001:db8::1", false, false, "must be written in brackets"},
      {"v6_bad", "[::g]", false, false, "invalid IPv6"},
      {"v6_unterminated", "[::1", false, false, "unterminated"},
      {"v6_empty_brackets", "[]", false, false, "unterminated"},
      {"bracketed_ipv4", "[127.0.0.1]", false, false, "invalid IPv6"},
      {"port_included", "example.com:443", false, false, "':' is not allowed"},
      // Numeric-looking names that are not valid addresses.
      {"octet_too_big", "1.2.3.999", false, false, "looks like an IP address"},
      {"hex_bad_digit", "0x1g", false, false, "looks like an IP address"},
      {"hex_bad_digit_last", "0x7f.1g", false, false, "looks like an IP address"},
      {"five_parts", "1.2.3.4.5", false, false, "looks like an IP address"},
      {"overflow", "4294967296", false, false, "looks like an IP address"},
      {"numeric_tld", "example.123", false, false, "looks like an IP address"},
      // Refused characters.
      {"percent", "exa%6dple.com", false, false, "percent-encoding"},
      {"userinfo", "user@example.com", false, false, "userinfo"},
      {"backslash", "evil.com\\@good.com", false, false, "backslash"},
      {"hash", "evil.com#good.com", false, false, "'#'"},
      {"space", "exa mple.com", false, false, "space"},
      {"tab", "example.com\t", false, false, "control character 0x09"},
      {"nul", "example.com\0.evil"sv, false, false, "control character 0x00"},
      {"del", "example\x7f.com", false, false, "control character 0x7f"},
      {"non_ascii",
       "b\xc3\xbc"
       "cher.example",
       false, false, "punycode"},
      {"slash", "example.com/path", false, false, "'/'"},
      {"question", "example.com?x", false, false, "'?'"},
      {"plus", "a+b.com", false, false, "character '+'"},
      // Structure.
      {"empty", "", false, false, "empty host"},
      {"only_dot", ".", false, false, "empty host"},
      {"empty_label", "a..b.com", false, false, "empty label"},
      {"leading_dot", ".example.com", false, false, "empty label"},
      {"two_trailing_dots", "example.com..", false, false, "empty label"},
      {"label_64", label64, false, false, "64 characters long (at most 63)"},
      {"leading_hyphen", "-a.example.com", false, false, "starts or ends with '-'"},
      {"trailing_hyphen", "a-.example.com", false, false, "starts or ends with '-'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto got = normalizeHost(c.input);
    if (!c.ok) {
      ASSERT_TRUE(std::holds_alternative<HostError>(got)) << std::get<Target>(got).name;
      const auto& msg = std::get<HostError>(got).message;
      EXPECT_NE(msg.find(c.want), std::string::npos) << msg;
      continue;
    }
    ASSERT_TRUE(std::holds_alternative<Target>(got)) << std::get<HostError>(got).message;
    const Target& t = std::get<Target>(got);
    EXPECT_EQ(t.isAddress, c.isAddress);
    EXPECT_EQ(t.name, c.want);
    if (t.isAddress) {
      EXPECT_EQ(t.address.str(), t.name);
    }
  }
}

TEST(PolicyNormalizeHost, NameOf253IsAcceptedAnd254Refused) {
  std::string name;
  while (name.size() < 253) name += "a.";
  name.resize(253);  // ends in "a"
  auto ok = normalizeHost(name);
  ASSERT_TRUE(std::holds_alternative<Target>(ok));
  EXPECT_EQ(std::get<Target>(ok).name.size(), 253u);
  // 253 plus a trailing dot is still 253.
  EXPECT_TRUE(std::holds_alternative<Target>(normalizeHost(name + ".")));
  auto bad = normalizeHost(name + "b");
  ASSERT_TRUE(std::holds_alternative<HostError>(bad));
  EXPECT_NE(std::get<HostError>(bad).message.find("254 characters long (at most 253)"),
            std::string::npos);
}

TEST(PolicyNormalizeHost, AddressFieldMatchesText) {
  auto got = normalizeHost("0x7f.1");
  ASSERT_TRUE(std::holds_alternative<Target>(got));
  EXPECT_EQ(std::get<Target>(got).address, IpAddress::v4(0x7f000001));
  EXPECT_FALSE(std::get<Target>(got).address.v6);
  got = normalizeHost("[::1]");
  EXPECT_TRUE(std::get<Target>(got).address.v6);
}

// The one check every path makes of a Host field or a TLS server name against the target a
// CONNECT or a captured address named (they were four, and two disagreed on "[v6]:port").
TEST(PolicyMatchesTarget, HostFieldsAndServerNames) {
  auto target = [](std::string_view h) { return std::get<Target>(normalizeHost(h)); };
  const Target api = target("api.test"), v6 = target("[2001:db8::1]");
  EXPECT_TRUE(matchesTarget("api.test", api, 443, 443));
  EXPECT_TRUE(matchesTarget("API.Test.", api, 443, 443));  // normalised: case, trailing dot
  EXPECT_TRUE(matchesTarget("api.test:443", api, 443, 443));
  EXPECT_TRUE(matchesTarget("api.test:8443", api, 8443, 443));
  EXPECT_FALSE(matchesTarget("api.test", api, 8443, 443));  // the default port is not 8443
  EXPECT_FALSE(matchesTarget("api.test:80", api, 443, 443));
  EXPECT_FALSE(matchesTarget("evil.test", api, 443, 443));
  EXPECT_FALSE(matchesTarget("api.test.evil.test", api, 443, 443));
  EXPECT_FALSE(matchesTarget("api.test@evil.test", api, 443, 443));
  EXPECT_FALSE(matchesTarget("", api, 443, 443));
  EXPECT_TRUE(matchesTarget("[2001:db8::1]", v6, 443, 443));
  EXPECT_TRUE(matchesTarget("[2001:db8::1]:8443", v6, 8443, 443));
  EXPECT_TRUE(matchesTarget("[2001:DB8:0::1]:80", v6, 80, 80));
  EXPECT_FALSE(matchesTarget("2001:db8::1", v6, 443, 443));  // unbracketed
  EXPECT_FALSE(matchesTarget("[2001:db8::1]:8443", v6, 443, 443));

  EXPECT_TRUE(namesTarget("api.test", api));
  EXPECT_TRUE(namesTarget("API.TEST", api));
  EXPECT_FALSE(namesTarget("api.test:443", api));  // a server name carries no port
  EXPECT_FALSE(namesTarget("other.test", api));
}

}  // namespace
}  // namespace sandgate::policy
