// The bounds an HTTP/2 client connection is held to (see h2_limits.h).
#include "proxy/h2/h2_limits.h"

#include <algorithm>

namespace sandgate::proxy {

void applyH2ClientLimits(nghttp2_option* opt, const config::EffectiveLimits& limits) {
  nghttp2_option_set_max_settings(opt, limits.h2MaxSettings);
  nghttp2_option_set_max_outbound_ack(opt, limits.h2MaxOutboundAck);
  nghttp2_option_set_max_continuations(opt, limits.h2MaxContinuations);
  // Rapid reset (CVE-2023-44487): past the burst and then the rate, the connection ends with
  // GOAWAY (the tunnel's audit line says h2_protocol_error).
  nghttp2_option_set_stream_reset_rate_limit(opt, limits.h2ResetBurst, limits.h2ResetsPerSecond);
}

std::array<nghttp2_settings_entry, 3> h2ClientSettings(const config::EffectiveLimits& limits,
                                                       int32_t window) {
  const uint32_t headerList =
      static_cast<uint32_t>(std::min<uint64_t>(limits.maxHeaderBytes, UINT32_MAX));
  return {{{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limits.h2MaxConcurrentStreams},
           {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(window)},
           {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, headerList}}};
}

}  // namespace sandgate::proxy
