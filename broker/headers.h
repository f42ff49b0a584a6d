// The broker's view of HTTP header fields: a plain list the proxy fills from (and writes back
// to) Beast's fields, so that broker/ stays free of Asio and Beast.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sandgate::broker {

// Header fields in order, name as sent (case preserved), value without surrounding spaces.
using Headers = std::vector<std::pair<std::string, std::string>>;

// ASCII case-insensitive equality (header names, URL schemes).
inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// The token of an `Authorization: Basic <token>` value (scheme matched case-insensitively),
// or empty when `value` is not a Basic credential.
inline std::string_view basicToken(std::string_view value) {
  constexpr std::string_view kScheme = "basic";
  if (value.size() <= kScheme.size() || !iequals(value.substr(0, kScheme.size()), kScheme) ||
      (value[kScheme.size()] != ' ' && value[kScheme.size()] != '\t')) {
    return {};
  }
  std::string_view token = value.substr(kScheme.size());
  while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
  return token;
}

}  // namespace sandgate::broker
