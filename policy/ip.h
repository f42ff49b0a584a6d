// IP addresses and CIDR ranges as plain values: parsing (every IPv4 spelling inet_aton
// accepts, IPv6 text), printing and prefix containment. No sockets, no lookups.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sandgate::policy {

struct IpAddress {
  bool v6 = false;
  // IPv4: bytes[0..3] in network order, the rest zero. IPv6: all 16 bytes.
  std::array<uint8_t, 16> bytes{};

  static IpAddress v4(uint32_t hostOrder);
  uint32_t v4Value() const;  // host order; only meaningful when !v6
  std::string str() const;   // canonical text: "127.0.0.1", "::1" (no brackets)
  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

// Any IPv4 form inet_aton(3) accepts: "127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1",
// "127.1", "0x7f.1". Rejects everything else (including whitespace and trailing garbage).
std::optional<IpAddress> parseIpv4Loose(std::string_view s);
// Standard IPv6 text (no brackets, no zone ID), including embedded dotted IPv4.
std::optional<IpAddress> parseIpv6(std::string_view s);
// parseIpv4Loose, else parseIpv6.
std::optional<IpAddress> parseIp(std::string_view s);

struct Cidr {
  IpAddress base;  // masked to the prefix
  int prefix = 0;  // 0..32 or 0..128

  bool contains(const IpAddress& a) const;
  std::string str() const;
};

// "10.0.0.0/8", "fc00::/7", or a single address (a /32 or /128). Host bits set beyond the
// prefix are an error (so "10.0.0.1/8" is rejected rather than silently widened); the IPv4
// part must be a strict dotted quad.
std::optional<Cidr> parseCidr(std::string_view s, std::string* error = nullptr);

}  // namespace sandgate::policy
