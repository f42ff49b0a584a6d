// What a config's `transparent:` section says about capture, compiled once per snapshot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "policy/ip.h"

namespace sandgate::proxy {

// What a config says about capture: the ports (80, 443, then transparent.ports) and the
// synthetic pools (transparent.ipv4_range / ipv6_range, else the defaults), as CIDRs and as
// the text the launcher routes. The same for an embedded proxy and for serve.
struct CaptureConfig {
  std::vector<uint16_t> ports;
  policy::Cidr v4, v6;
  std::string v4Text, v6Text;
};

// Errors (file:line:col, key transparent.ipv4_range / ipv6_range / transparent): a range that
// is not a CIDR of its family, or ranges that cannot make a pool (checkPoolRanges).
Result<CaptureConfig> captureConfig(const config::Config& cfg);

// Appends every port of `extra` that `ports` does not hold yet (order kept).
void addCapturePorts(std::vector<uint16_t>& ports, const std::vector<uint16_t>& extra);

}  // namespace sandgate::proxy
