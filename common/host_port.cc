// host:port splitting.
#include "common/host_port.h"

namespace sandgate {

std::optional<uint16_t> parsePort(std::string_view s, bool allowZero) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if ((v == 0 && !allowZero) || v > 65535) return std::nullopt;
  return static_cast<uint16_t>(v);
}

namespace {

std::optional<HostPort> split(std::string_view s, bool allowPortZero) {
  HostPort out;
  std::string_view rest;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos || close == 1) return std::nullopt;
    out.host = std::string(s.substr(1, close - 1));
    out.bracketed = true;
    rest = s.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return std::nullopt;
    rest.remove_prefix(1);
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return std::nullopt;
    out.host = std::string(s.substr(0, colon));
    // An unbracketed host may not contain ':' (IPv6 must be bracketed).
    if (out.host.find(':') != std::string::npos) return std::nullopt;
    rest = s.substr(colon + 1);
  }
  auto port = parsePort(rest, allowPortZero);
  if (!port) return std::nullopt;
  out.port = *port;
  return out;
}

}  // namespace

std::optional<HostPort> parseHostPort(std::string_view s) { return split(s, false); }

std::optional<HostPort> parseAuthority(std::string_view s, uint16_t defaultPort) {
  const bool bracketed = !s.empty() && s.front() == '[';
  const bool hasPort =
      bracketed ? s.find("]:") != std::string_view::npos : s.find(':') != std::string_view::npos;
  if (hasPort) return split(s, false);
  if (s.empty()) return std::nullopt;
  HostPort out;
  out.port = defaultPort;
  if (bracketed) {
    if (s.size() < 3 || s.back() != ']' || s.find(']') != s.size() - 1) return std::nullopt;
    out.host = std::string(s.substr(1, s.size() - 2));
    out.bracketed = true;
  } else {
    out.host = std::string(s);
  }
  return out;
}

std::optional<HostPort> parseListenAddress(std::string_view s) { return split(s, true); }

}  // namespace sandgate
