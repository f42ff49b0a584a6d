// Compiling `transparent:` (see capture_config.h).
#include "proxy/state/capture_config.h"

#include <algorithm>

#include "capture/address_pool.h"

namespace sandgate::proxy {

Result<CaptureConfig> captureConfig(const config::Config& cfg) {
  CaptureConfig out;
  out.ports = {80, 443};
  addCapturePorts(out.ports, cfg.transparent.ports);
  out.v4 = capture::defaultPoolV4();
  out.v6 = capture::defaultPoolV6();
  out.v4Text = std::string(capture::kDefaultPoolV4);
  out.v6Text = std::string(capture::kDefaultPoolV6);
  struct Range {
    const std::optional<config::Located<std::string>>& value;
    const char* key;
    bool v6;
    policy::Cidr& cidr;
    std::string& text;
  };
  for (const Range& r :
       {Range{cfg.transparent.ipv4Range, "transparent.ipv4_range", false, out.v4, out.v4Text},
        Range{cfg.transparent.ipv6Range, "transparent.ipv6_range", true, out.v6, out.v6Text}}) {
    if (!r.value) continue;
    std::string error;
    auto cidr = policy::parseCidr(r.value->value, &error);
    if (cidr && cidr->base.v6 != r.v6) error = r.v6 ? "not an IPv6 range" : "not an IPv4 range";
    if (!error.empty() || !cidr) {
      return Diagnostic{cfg.file, r.value->mark.line, r.value->mark.col, r.key,
                        error.empty() ? "not a CIDR" : error};
    }
    r.cidr = *cidr;
    r.text = r.value->value;
  }
  if (auto e = capture::checkPoolRanges(out.v4, out.v6)) {
    return Diagnostic{cfg.file, 0, 0, "transparent", *e};
  }
  return out;
}

void addCapturePorts(std::vector<uint16_t>& ports, const std::vector<uint16_t>& extra) {
  for (uint16_t port : extra) {
    if (std::find(ports.begin(), ports.end(), port) == ports.end()) ports.push_back(port);
  }
}

}  // namespace sandgate::proxy
