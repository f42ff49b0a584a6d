// Classification of resolved addresses into the ranges sandgate refuses to dial by default.
#pragma once

#include <string_view>

#include "policy/ip.h"

namespace sandgate::policy {

enum class AddressClass {
  kPublic,
  kLoopback,       // 127/8, ::1
  kUnspecified,    // 0/8, ::
  kPrivate,        // RFC 1918
  kCgnat,          // 100.64/10
  kLinkLocal,      // 169.254/16, fe80::/10
  kCloudMetadata,  // 169.254.169.254, 169.254.170.2, 100.100.100.200, fd00:ec2::254, ...
  kMulticast,      // 224/4, ff00::/8
  kBroadcast,      // 255.255.255.255
  kReserved,       // 240/4, 192.0.0/24, 198.18/15 benchmarking, 2001:db8::/32 ... see .cc
  kDocumentation,  // 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32
  kUniqueLocal,    // fc00::/7
};

struct Classification {
  AddressClass cls = AddressClass::kPublic;
  // How the IPv4 address was embedded, when the class came from an IPv4 inside an IPv6
  // address: "ipv4-mapped", "ipv4-compatible", "nat64", "6to4", "teredo"; else empty.
  std::string_view embedding;
  IpAddress embedded;  // the IPv4 address inside, when `embedding` is set
  bool denied() const { return cls != AddressClass::kPublic; }
};

Classification classify(const IpAddress& a);

// Stable lower-case name of the class ("loopback", "private", "cloud_metadata", ...).
std::string_view className(AddressClass c);

}  // namespace sandgate::policy
