// Parsing the TARGET a person types for `policy check` / `policy test`: "host:port", an
// "http://" or "https://" URL, an IP literal or a bare host name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "policy/host.h"

namespace sandgate::policy {

struct CheckTarget {
  Target target;
  uint16_t port = 443;
  std::string scheme;                // "http", "https", or empty for host:port / bare host
  std::optional<std::string> path;   // URL targets only: the path ("/" when empty), no query
};

// Bare hosts and IPs get port 443 (what a CONNECT would most often ask for); URLs get their
// scheme's default port. Userinfo, fragments and unknown schemes are refused with a reason.
std::variant<CheckTarget, std::string> parseCheckTarget(std::string_view text);

}  // namespace sandgate::policy
