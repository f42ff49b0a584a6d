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

}  // namespace
}  // namespace sandgate
