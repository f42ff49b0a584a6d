// classify(): which special-purpose range (RFC 6890 and friends) an address is in.
//
// The proxy refuses every class but kPublic unless a rule names a covering CIDR, so an error
// here is an SSRF hole: when in doubt an address is classed as reserved, never as public.
#include "policy/address_class.h"

#include <utility>
#include <vector>

namespace sandgate::policy {

namespace {

struct V4Range {
  uint32_t base;
  int prefix;
  AddressClass cls;
};

constexpr uint32_t ip4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return a << 24 | b << 16 | c << 8 | d;
}

// First match wins: the single addresses come before the ranges that contain them.
constexpr V4Range kV4Ranges[] = {
    // Instance metadata and host services: these hand out cloud credentials, so they get their
    // own class (and audit/metric label) even where a wider range would catch them anyway.
    {ip4(169, 254, 169, 254), 32, AddressClass::kCloudMetadata},  // AWS, GCP, Azure, OCI, ...
    {ip4(169, 254, 170, 2), 32, AddressClass::kCloudMetadata},    // AWS ECS task credentials
    {ip4(169, 254, 169, 123), 32, AddressClass::kCloudMetadata},  // AWS time sync
    {ip4(100, 100, 100, 200), 32, AddressClass::kCloudMetadata},  // Alibaba Cloud metadata
    {ip4(168, 63, 129, 16), 32, AddressClass::kCloudMetadata},    // Azure WireServer
    {ip4(255, 255, 255, 255), 32, AddressClass::kBroadcast},
    {ip4(0, 0, 0, 0), 8, AddressClass::kUnspecified},
    {ip4(10, 0, 0, 0), 8, AddressClass::kPrivate},
    {ip4(100, 64, 0, 0), 10, AddressClass::kCgnat},
    {ip4(127, 0, 0, 0), 8, AddressClass::kLoopback},
    {ip4(169, 254, 0, 0), 16, AddressClass::kLinkLocal},
    {ip4(172, 16, 0, 0), 12, AddressClass::kPrivate},
    {ip4(192, 0, 0, 0), 24, AddressClass::kReserved},  // IETF protocol assignments
    {ip4(192, 0, 2, 0), 24, AddressClass::kDocumentation},
    {ip4(192, 88, 99, 0), 24, AddressClass::kReserved},  // deprecated 6to4 relay anycast
    {ip4(192, 168, 0, 0), 16, AddressClass::kPrivate},
    {ip4(198, 18, 0, 0), 15, AddressClass::kReserved},  // benchmarking
    {ip4(198, 51, 100, 0), 24, AddressClass::kDocumentation},
    {ip4(203, 0, 113, 0), 24, AddressClass::kDocumentation},
    {ip4(224, 0, 0, 0), 4, AddressClass::kMulticast},
    {ip4(240, 0, 0, 0), 4, AddressClass::kReserved},
};

AddressClass classifyV4(uint32_t v) {
  for (const auto& r : kV4Ranges) {
    uint32_t mask = r.prefix == 0 ? 0 : ~uint32_t{0} << (32 - r.prefix);
    if ((v & mask) == r.base) return r.cls;
  }
  return AddressClass::kPublic;
}

struct V6Range {
  const char* text;  // for readability; parsed once below
  int prefix;
  AddressClass cls;
};

// Checked after the IPv4-embedding forms. Anything outside 2000::/3 that is not listed here is
// reserved (see classify()), so this only needs the carve-outs.
constexpr V6Range kV6Ranges[] = {
    {"fd00:ec2::254", 128, AddressClass::kCloudMetadata},  // AWS IMDS over IPv6
    {"::", 128, AddressClass::kUnspecified},
    {"::1", 128, AddressClass::kLoopback},
    {"2001:db8::", 32, AddressClass::kDocumentation},
    {"3fff::", 20, AddressClass::kDocumentation},  // RFC 9637
    {"2001:2::", 48, AddressClass::kReserved},     // benchmarking
    {"2001:10::", 28, AddressClass::kReserved},    // ORCHID (deprecated)
    {"2001:20::", 28, AddressClass::kReserved},    // ORCHIDv2
    {"fc00::", 7, AddressClass::kUniqueLocal},
    {"fe80::", 10, AddressClass::kLinkLocal},
    {"fec0::", 10, AddressClass::kReserved},  // deprecated site-local
    {"ff00::", 8, AddressClass::kMulticast},
};

Cidr v6Cidr(const char* text, int prefix) { return Cidr{*parseIpv6(text), prefix}; }

struct V6Table {
  Cidr nat64 = v6Cidr("64:ff9b::", 96);
  Cidr nat64Local = v6Cidr("64:ff9b:1::", 48);
  Cidr sixToFour = v6Cidr("2002::", 16);
  Cidr teredo = v6Cidr("2001::", 32);
  std::vector<std::pair<Cidr, AddressClass>> ranges;
  V6Table() {
    for (const auto& r : kV6Ranges) ranges.emplace_back(v6Cidr(r.text, r.prefix), r.cls);
  }
};

const V6Table& v6Table() {
  static const V6Table table;  // parsed once; constant afterwards, so safe to share
  return table;
}

IpAddress v4At(const IpAddress& a, int i0, int i1, int i2, int i3, uint8_t x = 0) {
  IpAddress v;
  v.bytes[0] = a.bytes[i0] ^ x;
  v.bytes[1] = a.bytes[i1] ^ x;
  v.bytes[2] = a.bytes[i2] ^ x;
  v.bytes[3] = a.bytes[i3] ^ x;
  return v;
}

Classification embedded(std::string_view how, const IpAddress& inner) {
  Classification c;
  c.cls = classifyV4(inner.v4Value());
  c.embedding = how;
  c.embedded = inner;
  return c;
}

bool zeroBytes(const IpAddress& a, int from, int to) {
  for (int i = from; i < to; ++i) {
    if (a.bytes[i] != 0) return false;
  }
  return true;
}

}  // namespace

Classification classify(const IpAddress& a) {
  if (!a.v6) return Classification{classifyV4(a.v4Value()), {}, {}};

  // Forms that carry an IPv4 address: the packet ends up at that IPv4 address (directly, via
  // a NAT64 gateway or a tunnel relay), so it must be judged by it. ::ffff:127.0.0.1 is
  // loopback, however it is spelled.
  const bool first80Zero = zeroBytes(a, 0, 10);
  if (first80Zero && a.bytes[10] == 0xff && a.bytes[11] == 0xff) {
    return embedded("ipv4-mapped", v4At(a, 12, 13, 14, 15));
  }
  if (first80Zero && a.bytes[10] == 0 && a.bytes[11] == 0 &&
      !(zeroBytes(a, 12, 15) && a.bytes[15] <= 1)) {
    return embedded("ipv4-compatible", v4At(a, 12, 13, 14, 15));  // :: and ::1 fall through
  }
  const V6Table& t = v6Table();
  if (t.nat64.contains(a)) return embedded("nat64", v4At(a, 12, 13, 14, 15));
  if (t.nat64Local.contains(a)) {
    // Local-use NAT64 (RFC 8215): operators pick their own prefix length, so read both the
    // common /96 layout and the RFC 6052 /48 layout (bits 48-63 and 72-103) and keep the
    // stricter answer. A /48 reading of all zeros just means that layout is not in use.
    Classification c96 = embedded("nat64", v4At(a, 12, 13, 14, 15));
    IpAddress in48 = v4At(a, 6, 7, 9, 10);
    if (c96.denied() || in48.v4Value() == 0) return c96;
    Classification c48 = embedded("nat64", in48);
    return c48.denied() ? c48 : c96;
  }
  if (t.sixToFour.contains(a)) return embedded("6to4", v4At(a, 2, 3, 4, 5));
  if (t.teredo.contains(a)) return embedded("teredo", v4At(a, 12, 13, 14, 15, 0xff));

  for (const auto& [cidr, cls] : t.ranges) {
    if (cidr.contains(a)) return Classification{cls, {}, {}};
  }
  // Only 2000::/3 is allocated for global unicast; the rest is unassigned or special.
  if ((a.bytes[0] & 0xe0) != 0x20) return Classification{AddressClass::kReserved, {}, {}};
  return Classification{};
}

std::string_view className(AddressClass c) {
  switch (c) {
    case AddressClass::kPublic:
      return "public";
    case AddressClass::kLoopback:
      return "loopback";
    case AddressClass::kUnspecified:
      return "unspecified";
    case AddressClass::kPrivate:
      return "private";
    case AddressClass::kCgnat:
      return "cgnat";
    case AddressClass::kLinkLocal:
      return "link_local";
    case AddressClass::kCloudMetadata:
      return "cloud_metadata";
    case AddressClass::kMulticast:
      return "multicast";
    case AddressClass::kBroadcast:
      return "broadcast";
    case AddressClass::kReserved:
      return "reserved";
    case AddressClass::kDocumentation:
      return "documentation";
    case AddressClass::kUniqueLocal:
      return "unique_local";
  }
  return "unknown";
}

}  // namespace sandgate::policy
