// Normalisation of the host a client asked for, before any rule sees it.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "policy/ip.h"

namespace sandgate::policy {

// A request target after normalisation: either a DNS name (lower-case ASCII, no trailing
// dot, valid labels) or an IP address (any inet_aton spelling, or a bracketed IPv6 literal).
struct Target {
  bool isAddress = false;
  std::string name;    // normalised name, or the canonical text of the address
  IpAddress address;   // when isAddress
};

struct HostError {
  std::string message;  // why the host was refused, for the client and the audit log
};

// Normalises the host part of an authority as a client sent it (CONNECT target host,
// absolute-URI host, Host header host, TARGET on the CLI). Brackets are required around
// IPv6 and are removed; zone IDs, percent-encoding, userinfo, non-ASCII bytes, empty
// labels, labels over 63 or names over 253 characters are refused.
std::variant<Target, HostError> normalizeHost(std::string_view host);

}  // namespace sandgate::policy
