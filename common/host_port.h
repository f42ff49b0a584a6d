// Splitting "host:port" / "[v6]:port" authorities into their parts (syntax only, no lookups).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sandgate {

struct HostPort {
  std::string host;  // without brackets for IPv6 literals
  uint16_t port = 0;
  bool bracketed = false;  // the host was written as "[...]"
};

// Parses "host:port" or "[v6]:port". The port must be decimal 1..65535 without sign or
// leading '+'. Returns nullopt on any syntax error. The host is returned verbatim (not
// normalised); an empty host is an error.
std::optional<HostPort> parseHostPort(std::string_view s);

// An authority whose port may be left out, as a Host field writes it: "name", "name:port",
// "[v6]" or "[v6]:port". A missing port is `defaultPort`. The same syntax rules otherwise.
std::optional<HostPort> parseAuthority(std::string_view s, uint16_t defaultPort);

// Same, for addresses sandgate listens on: port 0 ("any free port") is allowed too.
std::optional<HostPort> parseListenAddress(std::string_view s);

// Parses a decimal port "1".."65535" (no sign, no leading zeros beyond "0"-free digits).
std::optional<uint16_t> parsePort(std::string_view s, bool allowZero = false);

}  // namespace sandgate
