// Transparent capture inside the sandbox's network namespace: the synthetic ranges routed to
// `lo` as local addresses, the DNS stub's sockets, and the capture listeners.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sandgate::sandbox {

struct CaptureSpec {
  std::vector<uint16_t> ports;  // capture ports (TCP), e.g. 80 and 443
  std::string rangeV4;          // "198.18.0.0/15"
  std::string rangeV6;          // "fd53:4744:4e53::/64"; empty: no IPv6 capture
};

// What is handed to the proxy (close-on-exec descriptors).
struct CaptureSockets {
  int dnsUdp = -1;             // UDP 127.0.0.53:53
  int dnsTcp = -1;             // TCP 127.0.0.53:53, listening
  std::vector<int> listeners;  // 0.0.0.0:port and, with IPv6, [::]:port (V6ONLY)
  bool ipv6 = false;           // the IPv6 range is routed and listened on
};

// The DNS stub's address: 127.0.0.53 like systemd-resolved's stub, so tools that special-case
// a local stub behave, and 127.0.0.1:53 stays free for the command.
inline constexpr const char* kDnsStubAddress = "127.0.0.53";

// Sandbox side, after setUpNetwork() (lo is up). Adds `local <range> dev lo` routes over
// rtnetlink (the equivalent of `ip route add local 198.18.0.0/15 dev lo`: every address in
// the range is then an address of this namespace), binds the DNS sockets and one listener per
// capture port on the wildcard address. The wildcard works because the namespace has only
// `lo`: a connection to 198.18.0.7:443 lands on 0.0.0.0:443, and the accepted socket's local
// address tells the proxy which name it was. Throws SetupError; IPv6 being unavailable is a
// warning (IPv4 capture only).
CaptureSockets setUpCapture(const CaptureSpec& spec, std::vector<std::string>* warnings);

// rtnetlink RTM_NEWROUTE for `local <cidr> dev lo` in the current network namespace. Returns 0
// or an errno value. Exposed for tests.
int addLocalRoute(const std::string& cidr);

}  // namespace sandgate::sandbox
