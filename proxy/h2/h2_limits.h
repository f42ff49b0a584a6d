// The bounds an HTTP/2 client connection is held to (the `limits:` keys h2_*), as nghttp2
// options and as the SETTINGS sandgate sends the client. Kept apart from the connection code so
// that fuzz/h2_frames_fuzz.cc builds the client's session with exactly these bounds.
#pragma once

#include <nghttp2/nghttp2.h>

#include <array>
#include <cstdint>

#include "config/config.h"

namespace sandgate::proxy {

// nghttp2's flood bounds on the client's session: rapid reset (a burst, then a rate; past it
// GOAWAY), CONTINUATION frames per header block, entries per SETTINGS frame, acks queued for a
// client that does not read. Streams beyond SETTINGS_MAX_CONCURRENT_STREAMS are refused before
// the client has acknowledged the setting, not only after (nghttp2 does so by itself).
void applyH2ClientLimits(nghttp2_option* opt, const config::EffectiveLimits& limits);

// The SETTINGS sandgate sends the client: its stream count, the per-stream window `window`,
// and the header list size (limits.max_header_bytes).
std::array<nghttp2_settings_entry, 3> h2ClientSettings(const config::EffectiveLimits& limits,
                                                       int32_t window);

}  // namespace sandgate::proxy
