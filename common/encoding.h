// Base64 (standard and URL-safe) and percent-encoding: Basic credentials, JWTs, query
// parameters (no I/O).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandgate {

// Standard base64 with padding (RFC 4648 section 4), as used by HTTP Basic.
std::string base64Encode(std::string_view in);
// Strict decoding: standard alphabet, padding required, no whitespace. nullopt on any error.
std::optional<std::string> base64Decode(std::string_view in);

// base64url without padding (RFC 4648 section 5), as JWTs use it. Decoding refuses the
// standard alphabet's '+' and '/', padding, and an impossible length.
std::string base64UrlEncode(std::string_view in);
std::optional<std::string> base64UrlDecode(std::string_view in);

// Percent-encodes everything but RFC 3986 unreserved characters (A-Z a-z 0-9 - . _ ~), so the
// result is safe as a query parameter name or value.
std::string percentEncode(std::string_view in);
// The value of one hexadecimal digit (either case), or -1.
int hexValue(char c);

// Decodes %XX escapes (and '+' as space when `plusIsSpace`). nullopt on a malformed escape.
std::optional<std::string> percentDecode(std::string_view in, bool plusIsSpace);

}  // namespace sandgate
