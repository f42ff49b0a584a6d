// normalizeHost(): one canonical spelling per host before any rule sees it.
//
// Every spelling that a resolver or an upstream would read differently from a rule is either
// canonicalised (case, trailing dot, every inet_aton form of an IPv4 address) or refused
// (percent-encoding, userinfo, zone IDs, non-ASCII, numeric-looking names). A policy can only
// be as good as the agreement between what it matched and what gets dialled.
#include "policy/host.h"

#include <cstdio>

#include "common/host_port.h"

namespace sandgate::policy {

namespace {

std::variant<Target, HostError> refuse(std::string message) {
  return HostError{std::move(message)};
}

std::string byteText(unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", c);
  return buf;
}

// Why byte `c` may not appear in a host, or nullptr when it may.
std::string charProblem(unsigned char c) {
  if (c >= 0x80) {
    return "non-ASCII byte " + byteText(c) +
           " in host; internationalised names must be written in punycode (xn--...)";
  }
  if (c < 0x20 || c == 0x7f) return "control character " + byteText(c) + " in host";
  switch (c) {
    case ' ':
      return "space in host";
    case '%':
      return "percent-encoding in host is not allowed";
    case '@':
      return "userinfo ('@') in host is not allowed";
    case '\\':
      return "backslash in host is not allowed";
    case '#':
      return "'#' in host is not allowed";
    case '/':
    case '?':
      return std::string("'") + static_cast<char>(c) + "' in host is not allowed";
    default:
      break;
  }
  bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.';
  if (!ok) return std::string("character '") + static_cast<char>(c) + "' is not allowed in a host";
  return {};
}

bool startsWithDigit(std::string_view s) { return !s.empty() && s[0] >= '0' && s[0] <= '9'; }

}  // namespace

std::optional<std::string> checkDnsName(std::string_view name) {
  if (name.empty()) return "empty host name";
  if (name.size() > 253) {
    return "host name is " + std::to_string(name.size()) + " characters long (at most 253)";
  }
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    std::string_view label = name.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (label.empty()) return "empty label in host name \"" + std::string(name) + "\"";
    if (label.size() > 63) {
      return "label \"" + std::string(label.substr(0, 20)) + "...\" is " +
             std::to_string(label.size()) + " characters long (at most 63)";
    }
    if (label.front() == '-' || label.back() == '-') {
      return "label \"" + std::string(label) + "\" starts or ends with '-'";
    }
    for (char c : label) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
      if (!ok) {
        return "character '" + std::string(1, c) + "' is not allowed in label \"" +
               std::string(label) + "\"";
      }
    }
    if (dot == std::string_view::npos) {
      // No top-level domain starts with a digit. A name that ends like a number is either an
      // IP address in some spelling (handled before we get here) or an attempt to smuggle
      // one past the rules ("1.2.3.999", "0x7f.1g"), which resolvers treat inconsistently.
      if (startsWithDigit(label)) {
        return "\"" + std::string(name) + "\" looks like an IP address but is not a valid one";
      }
      return std::nullopt;
    }
    start = dot + 1;
  }
}

std::variant<Target, HostError> normalizeHost(std::string_view host) {
  if (host.empty()) return refuse("empty host");
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) return refuse("unterminated '[' in host");
    std::string_view inner = host.substr(1, host.size() - 2);
    // Zone IDs select an interface on this machine: never meaningful to a proxy, and a classic
    // way to confuse address comparisons.
    if (inner.find('%') != std::string_view::npos) {
      return refuse("IPv6 zone IDs are not allowed in host \"" + std::string(host) + "\"");
    }
    auto addr = parseIpv6(inner);
    if (!addr) return refuse("invalid IPv6 address \"" + std::string(host) + "\"");
    return Target{true, addr->str(), *addr};
  }
  for (char ch : host) {
    if (ch == ':') {
      if (parseIpv6(host)) {
        return refuse("IPv6 address \"" + std::string(host) + "\" must be written in brackets");
      }
      return refuse("':' is not allowed in host \"" + std::string(host) + "\"");
    }
    if (ch == '[' || ch == ']') return refuse("misplaced '[' or ']' in host");
    std::string problem = charProblem(static_cast<unsigned char>(ch));
    if (!problem.empty()) return refuse(std::move(problem));
  }
  std::string name(host);
  for (char& c : name) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  if (name.back() == '.') name.pop_back();  // the root: "example.com." is "example.com"
  if (name.empty()) return refuse("empty host");
  if (auto addr = parseIpv4Loose(name)) return Target{true, addr->str(), *addr};
  if (auto problem = checkDnsName(name)) return refuse(std::move(*problem));
  return Target{false, std::move(name), {}};
}

bool namesTarget(std::string_view name, const Target& target) {
  // The usual case, the name exactly as the target has it (already normal), without
  // normalising it again (a copy per request).
  if (name == target.name) return true;
  auto n = normalizeHost(name);
  const auto* t = std::get_if<Target>(&n);
  return t && t->name == target.name;
}

bool matchesTarget(std::string_view authority, const Target& target, uint16_t port,
                   uint16_t defaultPort) {
  auto hp = parseAuthority(authority, defaultPort);
  if (!hp || hp->port != port) return false;
  if (hp->host == target.name) return true;
  // An IPv6 literal is normalised in its brackets, as a request target writes it.
  return namesTarget(hp->bracketed ? "[" + hp->host + "]" : hp->host, target);
}

}  // namespace sandgate::policy
