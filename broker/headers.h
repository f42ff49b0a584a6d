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

// `s` without the spaces and tabs around it (HTTP's optional whitespace).
inline std::string_view trimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls `f` with each element of a comma-separated field value (Connection, Content-Encoding,
// Transfer-Encoding), trimmed; empty elements are skipped.
template <class F>
void forEachListElement(std::string_view value, F&& f) {
  while (true) {
    const size_t comma = value.find(',');
    if (std::string_view e = trimOws(value.substr(0, comma)); !e.empty()) f(e);
    if (comma == std::string_view::npos) return;
    value.remove_prefix(comma + 1);
  }
}

// The token of an `Authorization: Basic <token>` value (scheme matched case-insensitively),
// or empty when `value` is not a Basic credential.
inline std::string_view basicToken(std::string_view value) {
  constexpr std::string_view kScheme = "basic";
  if (value.size() <= kScheme.size() || !iequals(value.substr(0, kScheme.size()), kScheme) ||
      (value[kScheme.size()] != ' ' && value[kScheme.size()] != '\t')) {
    return {};
  }
  return trimOws(value.substr(kScheme.size()));
}

}  // namespace sandgate::broker
