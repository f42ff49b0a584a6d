#include "common/host_port.h"

#include <gtest/gtest.h>

namespace sandgate {
namespace {

struct Case {
  const char* name;
  const char* input;
  bool ok;
  const char* host;
  uint16_t port;
};

TEST(HostPort, Table) {
  const Case cases[] = {
      {"name", "example.com:443", true, "example.com", 443},
      {"ipv4", "127.0.0.1:8080", true, "127.0.0.1", 8080},
      {"ipv6", "[::1]:3128", true, "::1", 3128},
      {"max_port", "a:65535", true, "a", 65535},
      {"port_zero", "a:0", false, "", 0},
      {"port_too_big", "a:65536", false, "", 0},
      {"port_sign", "a:+80", false, "", 0},
      {"port_empty", "a:", false, "", 0},
      {"no_port", "example.com", false, "", 0},
      {"no_host", ":80", false, "", 0},
      {"bare_ipv6", "::1:80", false, "", 0},
      {"unclosed_bracket", "[::1:80", false, "", 0},
      {"bracket_no_port", "[::1]", false, "", 0},
      {"empty_brackets", "[]:80", false, "", 0},
      {"port_letters", "a:8o", false, "", 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto hp = parseHostPort(c.input);
    ASSERT_EQ(hp.has_value(), c.ok);
    if (c.ok) {
      EXPECT_EQ(hp->host, c.host);
      EXPECT_EQ(hp->port, c.port);
    }
  }
}

TEST(HostPort, ListenAddressAllowsPortZero) {
  EXPECT_FALSE(parseHostPort("127.0.0.1:0"));
  ASSERT_TRUE(parseListenAddress("127.0.0.1:0"));
  EXPECT_EQ(parseListenAddress("[::1]:0")->port, 0);
  EXPECT_FALSE(parseListenAddress("127.0.0.1:65536"));
}

TEST(HostPort, BracketedFlag) {
  EXPECT_TRUE(parseHostPort("[::1]:1")->bracketed);
  EXPECT_FALSE(parseHostPort("h:1")->bracketed);
}

TEST(HostPort, AuthorityMayLeaveThePortOut) {
  struct Case {
    const char* in;
    const char* host;
    uint16_t port;
  };
  for (const Case& c : {Case{"api.test", "api.test", 443}, Case{"api.test:8443", "api.test", 8443},
                        Case{"[::1]", "::1", 443}, Case{"[::1]:8443", "::1", 8443},
                        Case{"10.0.0.1:80", "10.0.0.1", 80}}) {
    SCOPED_TRACE(c.in);
    auto hp = parseAuthority(c.in, 443);
    ASSERT_TRUE(hp);
    EXPECT_EQ(hp->host, c.host);
    EXPECT_EQ(hp->port, c.port);
  }
  for (const char* bad : {"", "[]", "[::1", "[::1]x", "[::1]:", "::1", "a:b:80",
                          "api.test:", "api.test:0", "api.test:65536", "api.test:+80", "[::1]]"}) {
    EXPECT_FALSE(parseAuthority(bad, 443)) << bad;
  }
}

}  // namespace
}  // namespace sandgate
