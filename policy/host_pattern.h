// Host patterns as written in rules (`example.com`, `*.example.com`, `re:<RE2>`): validation
// and canonical form. Internal to policy/.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "policy/ip.h"

namespace sandgate::policy {

struct HostPattern {
  enum class Kind { kExact, kWildcard, kRegex };
  Kind kind = Kind::kExact;
  // kExact: the normalised name, or the canonical text of an IP address (isAddress).
  // kWildcard: the suffix after "*." ("example.com" for "*.example.com").
  // kRegex: the RE2 source after "re:", matched against the whole normalised host.
  std::string text;
  bool isAddress = false;
};

// Parses and validates one `host:` value. Returns the pattern, or a message that says what is
// wrong and what was expected.
std::variant<HostPattern, std::string> parseHostPattern(std::string_view raw);

// True when `suffix` (lower-case, no trailing dot) is in the built-in list of public suffixes
// under which unrelated parties register names ("com", "co.uk", "github.io", ...).
bool isPublicSuffix(std::string_view suffix);

}  // namespace sandgate::policy
