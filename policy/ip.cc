// IP address and CIDR parsing/printing written by hand: deterministic, locale-free, and
// exactly as permissive as we decide (inet_aton's spellings for IPv4, RFC 4291 text for IPv6).
#include "policy/ip.h"

#include <cstdio>

namespace sandgate::policy {

namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// One inet_aton part: "0x1f" hex, "017" octal, "17" decimal. Parts that overflow 32 bits are
// rejected (older libcs wrapped silently; a wrapped number would name a different address).
std::optional<uint64_t> parseAtonPart(std::string_view s) {
  if (s.empty() || !isDigit(s[0])) return std::nullopt;
  unsigned base = 10;
  size_t i = 0;
  if (s[0] == '0') {
    if (s.size() > 1 && (s[1] == 'x' || s[1] == 'X')) {
      base = 16;
      i = 2;
      if (s.size() == 2) return std::nullopt;  // "0x" alone: no digits
    } else {
      base = 8;
    }
  }
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    int d = base == 16 ? hexValue(s[i]) : (isDigit(s[i]) ? s[i] - '0' : -1);
    if (d < 0 || static_cast<unsigned>(d) >= base) return std::nullopt;
    v = v * base + static_cast<unsigned>(d);
    if (v > 0xffffffffULL) return std::nullopt;
  }
  return v;
}

// "0".."255", decimal, no leading zeros: the only spelling allowed inside IPv6 text and CIDRs,
// where ambiguity (is 010 eight or ten?) buys nothing.
std::optional<uint8_t> parseStrictOctet(std::string_view s) {
  if (s.empty() || s.size() > 3) return std::nullopt;
  if (s.size() > 1 && s[0] == '0') return std::nullopt;
  unsigned v = 0;
  for (char c : s) {
    if (!isDigit(c)) return std::nullopt;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v > 255) return std::nullopt;
  return static_cast<uint8_t>(v);
}

std::optional<IpAddress> parseStrictDottedQuad(std::string_view s) {
  IpAddress a;
  for (int i = 0; i < 4; ++i) {
    size_t dot = s.find('.');
    std::string_view part = i < 3 ? s.substr(0, dot) : s;
    if (i < 3 && dot == std::string_view::npos) return std::nullopt;
    auto octet = parseStrictOctet(part);
    if (!octet) return std::nullopt;
    a.bytes[i] = *octet;
    if (i < 3) s.remove_prefix(dot + 1);
  }
  return a;
}

bool isZero(const IpAddress& a, int from, int to) {
  for (int i = from; i < to; ++i) {
    if (a.bytes[i] != 0) return false;
  }
  return true;
}

}  // namespace

IpAddress IpAddress::v4(uint32_t hostOrder) {
  IpAddress a;
  a.bytes[0] = static_cast<uint8_t>(hostOrder >> 24);
  a.bytes[1] = static_cast<uint8_t>(hostOrder >> 16);
  a.bytes[2] = static_cast<uint8_t>(hostOrder >> 8);
  a.bytes[3] = static_cast<uint8_t>(hostOrder);
  return a;
}

uint32_t IpAddress::v4Value() const {
  return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) |
         uint32_t{bytes[3]};
}

std::string IpAddress::str() const {
  char buf[64];
  if (!v6) {
    std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", bytes[0], bytes[1], bytes[2], bytes[3]);
    return buf;
  }
  // RFC 5952: IPv4-mapped addresses keep their dotted tail so that people recognise them.
  if (isZero(*this, 0, 10) && bytes[10] == 0xff && bytes[11] == 0xff) {
    std::snprintf(buf, sizeof buf, "::ffff:%u.%u.%u.%u", bytes[12], bytes[13], bytes[14],
                  bytes[15]);
    return buf;
  }
  uint16_t g[8];
  for (int i = 0; i < 8; ++i) g[i] = static_cast<uint16_t>(bytes[2 * i] << 8 | bytes[2 * i + 1]);
  // Longest run of two or more zero groups is compressed; the first one wins a tie.
  int bestStart = -1, bestLen = 0;
  for (int i = 0; i < 8;) {
    if (g[i] != 0) {
      ++i;
      continue;
    }
    int j = i;
    while (j < 8 && g[j] == 0) ++j;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  std::string out;
  for (int i = 0; i < 8; ++i) {
    if (i == bestStart) {
      out += "::";
      i += bestLen - 1;
      continue;
    }
    if (!out.empty() && out.back() != ':') out += ':';
    std::snprintf(buf, sizeof buf, "%x", g[i]);
    out += buf;
  }
  return out;
}

std::optional<IpAddress> parseIpv4Loose(std::string_view s) {
  uint64_t parts[4];
  int n = 0;
  while (true) {
    if (n == 4) return std::nullopt;
    size_t dot = s.find('.');
    auto v = parseAtonPart(s.substr(0, dot));
    if (!v) return std::nullopt;
    parts[n++] = *v;
    if (dot == std::string_view::npos) break;
    s.remove_prefix(dot + 1);
  }
  // The last part fills all remaining bytes; every earlier part is a single byte.
  for (int i = 0; i < n - 1; ++i) {
    if (parts[i] > 0xff) return std::nullopt;
  }
  static constexpr uint64_t kLastMax[] = {0xffffffffULL, 0xffffff, 0xffff, 0xff};
  if (parts[n - 1] > kLastMax[n - 1]) return std::nullopt;
  uint32_t v = static_cast<uint32_t>(parts[n - 1]);
  for (int i = 0; i < n - 1; ++i) v |= static_cast<uint32_t>(parts[i]) << (24 - 8 * i);
  return IpAddress::v4(v);
}

std::optional<IpAddress> parseIpv6(std::string_view s) {
  uint16_t groups[8];
  int n = 0;
  int gap = -1;  // index in `groups` where "::" stands
  size_t i = 0;
  const size_t len = s.size();
  if (len < 2) return std::nullopt;
  if (s[0] == ':') {
    if (s[1] != ':') return std::nullopt;
    gap = 0;
    i = 2;
  }
  while (i < len) {
    size_t end = s.find(':', i);
    if (end == std::string_view::npos) end = len;
    std::string_view tok = s.substr(i, end - i);
    if (tok.find('.') != std::string_view::npos) {
      // A dotted IPv4 tail is only valid as the last 32 bits.
      if (end != len || n > 6) return std::nullopt;
      auto v4 = parseStrictDottedQuad(tok);
      if (!v4) return std::nullopt;
      groups[n++] = static_cast<uint16_t>(v4->bytes[0] << 8 | v4->bytes[1]);
      groups[n++] = static_cast<uint16_t>(v4->bytes[2] << 8 | v4->bytes[3]);
      break;
    }
    if (tok.empty() || tok.size() > 4 || n == 8) return std::nullopt;
    unsigned v = 0;
    for (char c : tok) {
      int d = hexValue(c);
      if (d < 0) return std::nullopt;
      v = v << 4 | static_cast<unsigned>(d);
    }
    groups[n++] = static_cast<uint16_t>(v);
    i = end;
    if (i == len) break;
    if (i + 1 < len && s[i + 1] == ':') {
      if (gap >= 0) return std::nullopt;  // at most one "::"
      gap = n;
      i += 2;
    } else {
      ++i;
      if (i == len) return std::nullopt;  // trailing single ':'
    }
  }
  if (gap < 0 ? n != 8 : n > 7) return std::nullopt;
  IpAddress a;
  a.v6 = true;
  int fill = 8 - n;
  int out = 0;
  for (int k = 0; k < n; ++k) {
    if (k == gap) out += fill;
    a.bytes[2 * out] = static_cast<uint8_t>(groups[k] >> 8);
    a.bytes[2 * out + 1] = static_cast<uint8_t>(groups[k]);
    ++out;
  }
  return a;
}

std::optional<IpAddress> parseIp(std::string_view s) {
  if (auto a = parseIpv4Loose(s)) return a;
  return parseIpv6(s);
}

bool Cidr::contains(const IpAddress& a) const {
  if (a.v6 != base.v6) return false;
  int full = prefix / 8;
  for (int i = 0; i < full; ++i) {
    if (a.bytes[i] != base.bytes[i]) return false;
  }
  int rest = prefix % 8;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a.bytes[full] & mask) == base.bytes[full];
}

std::string Cidr::str() const { return base.str() + "/" + std::to_string(prefix); }

std::optional<Cidr> parseCidr(std::string_view s, std::string* error) {
  auto fail = [&](std::string msg) -> std::optional<Cidr> {
    if (error) *error = std::move(msg);
    return std::nullopt;
  };
  size_t slash = s.find('/');
  std::string_view addrText = s.substr(0, slash);
  std::optional<IpAddress> addr = addrText.find(':') != std::string_view::npos
                                      ? parseIpv6(addrText)
                                      : parseStrictDottedQuad(addrText);
  if (!addr) {
    return fail("expected an IPv4 dotted quad or an IPv6 address, optionally with /prefix, got \"" +
                std::string(s) + "\"");
  }
  const int maxPrefix = addr->v6 ? 128 : 32;
  int prefix = maxPrefix;
  if (slash != std::string_view::npos) {
    std::string_view p = s.substr(slash + 1);
    if (p.empty() || p.size() > 3 || (p.size() > 1 && p[0] == '0')) {
      return fail("invalid prefix length \"" + std::string(p) + "\"");
    }
    prefix = 0;
    for (char c : p) {
      if (!isDigit(c)) return fail("invalid prefix length \"" + std::string(p) + "\"");
      prefix = prefix * 10 + (c - '0');
    }
    if (prefix > maxPrefix) {
      return fail("prefix length " + std::to_string(prefix) + " exceeds " +
                  std::to_string(maxPrefix));
    }
  }
  Cidr c;
  c.base = *addr;
  c.prefix = prefix;
  for (int bit = prefix; bit < maxPrefix; ++bit) {
    c.base.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  }
  // A range written with host bits set is most likely a typo; widening it silently could open
  // far more than the author meant.
  if (c.base != *addr) {
    return fail("host bits are set beyond /" + std::to_string(prefix) + " (did you mean " +
                c.str() + "?)");
  }
  return c;
}

}  // namespace sandgate::policy
