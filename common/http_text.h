// HTTP's small text rules (RFC 9110): case-insensitive names, optional whitespace, lists.
// Shared by the broker (header edits) and the proxy (head validation, hop-by-hop fields).
#pragma once

#include <string_view>

namespace sandgate {

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

}  // namespace sandgate
