// Normalisation of the host a client asked for, before any rule sees it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "policy/ip.h"

namespace sandgate::policy {

// A request target after normalisation: either a DNS name (lower-case ASCII, no trailing
// dot, valid labels) or an IP address (any inet_aton spelling, or a bracketed IPv6 literal).
struct Target {
  bool isAddress = false;
  std::string name;   // normalised name, or the canonical text of the address
  IpAddress address;  // when isAddress
};

struct HostError {
  std::string message;  // why the host was refused, for the client and the audit log
};

// Normalises the host part of an authority as a client sent it (CONNECT target host,
// absolute-URI host, Host header host, TARGET on the CLI). Brackets are required around
// IPv6 and are removed; zone IDs, percent-encoding, userinfo, non-ASCII bytes, empty
// labels, labels over 63 or names over 253 characters are refused.
// A name whose last label starts with a digit must be a valid IPv4 address in some spelling
// (then it is one) or it is refused ("1.2.3.999", "0x1g"). An IP-literal target is matched only
// by rules with `cidrs` and by exact `host` rules written as that address.
std::variant<Target, HostError> normalizeHost(std::string_view host);

// Checks an already lower-cased name without trailing dot: labels of 1..63 characters from
// [a-z0-9_-] not starting or ending with '-', at most 253 characters in all, and a last label
// that does not start with a digit. Returns why the name is invalid, or nullopt.
std::optional<std::string> checkDnsName(std::string_view name);

// Does `name` (a TLS server name, no port) name `target`, once normalised?
bool namesTarget(std::string_view name, const Target& target);

// Does `authority` (a Host field: "name", "name:port", "[v6]" or "[v6]:port") name `target` on
// `port`? A missing port is `defaultPort` (80 for http, 443 inside a TLS tunnel).
bool matchesTarget(std::string_view authority, const Target& target, uint16_t port,
                   uint16_t defaultPort);

}  // namespace sandgate::policy
