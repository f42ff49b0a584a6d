// Fuzzes the HTTP/2 client side of interception: bytes a client sends (after the connection
// preface, which is prepended) through an nghttp2 server session built as sandgate builds the
// client's session (proxy/h2/h2_limits.cc: its flood bounds and its SETTINGS, with HTTP
// messaging on), and into callbacks that hold what sandgate's stream code relies on.
//
// The first 4 input bytes choose the task's h2 limits (small, so that the bounds are reached):
// streams at once 1..8, CONTINUATION frames 0..4, reset burst 1..16 and rate 1..4, SETTINGS
// entries 1..16, queued acks 1..64, header list 256..16 KiB.
//
// Properties, beyond not crashing (sandgate's h2_request.cc renders a stream's fields as the
// HTTP/1.1 head they stand for and trusts nghttp2 for these, so a failure here is a smuggling
// path):
//  - No more streams than h2_max_concurrent_streams are ever open at once.
//  - Every request field handed over has a lower-case name without CR, LF, NUL, space or colon
//    (but a pseudo-field's leading one), and a value without CR, LF or NUL.
//  - A request head that completes has :method and, unless it is CONNECT, :scheme and a
//    non-empty :path; no pseudo-field follows a regular one and none is repeated.
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "fuzz/check.h"
#include "proxy/h2/h2_limits.h"

namespace {

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

struct Head {
  bool regularSeen = false;
  std::set<std::string> pseudo;
};

struct State {
  uint32_t maxStreams = 0;
  std::set<int32_t> open;
  std::map<int32_t, Head> heads;
};

State& st(void* p) { return *static_cast<State*>(p); }

int beginHeaders(nghttp2_session*, const nghttp2_frame* f, void* p) {
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  State& s = st(p);
  s.open.insert(f->hd.stream_id);
  s.heads[f->hd.stream_id] = Head{};
  SANDGATE_FUZZ_CHECK(s.open.size() <= s.maxStreams, "more streams open than the limit allows");
  return 0;
}

int onHeader(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name, size_t namelen,
             const uint8_t* value, size_t valuelen, uint8_t, void* p) {
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  const std::string_view n(reinterpret_cast<const char*>(name), namelen);
  const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  SANDGATE_FUZZ_CHECK(!n.empty(), "an empty field name");
  for (size_t i = 0; i < n.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(n[i]);
    SANDGATE_FUZZ_CHECK(!(c >= 'A' && c <= 'Z'), "an upper-case field name");
    SANDGATE_FUZZ_CHECK(c > 0x20 && c != 0x7f, "a control byte or space in a field name");
    SANDGATE_FUZZ_CHECK(c != ':' || i == 0, "a colon inside a field name");
  }
  for (char c : v) {
    SANDGATE_FUZZ_CHECK(c != '\r' && c != '\n' && c != '\0', "CR, LF or NUL in a field value");
  }
  if (f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  Head& h = st(p).heads[f->hd.stream_id];
  if (n[0] == ':') {
    SANDGATE_FUZZ_CHECK(!h.regularSeen, "a pseudo-field after a regular field");
    SANDGATE_FUZZ_CHECK(h.pseudo.insert(std::string(n)).second, "a repeated pseudo-field");
    if (n == ":path") SANDGATE_FUZZ_CHECK(!v.empty(), "an empty :path");
  } else {
    h.regularSeen = true;
  }
  return 0;
}

int onFrame(nghttp2_session* session, const nghttp2_frame* f, void* p) {
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  State& s = st(p);
  const Head& h = s.heads[f->hd.stream_id];
  SANDGATE_FUZZ_CHECK(h.pseudo.count(":method") == 1, "a request head without :method");
  // Extended CONNECT (RFC 8441) is never enabled, so :protocol never arrives. A CONNECT head
  // carries :authority alone (RFC 9113 §8.5); sandgate refuses it (bad_target).
  SANDGATE_FUZZ_CHECK(h.pseudo.count(":protocol") == 0, "a :protocol field (extended CONNECT)");
  if (h.pseudo.count(":scheme") == 0) {
    SANDGATE_FUZZ_CHECK(h.pseudo.count(":path") == 0, "a :path without :scheme (CONNECT)");
  }
  if (h.pseudo.count(":scheme")) {
    SANDGATE_FUZZ_CHECK(h.pseudo.count(":path") == 1, "a request head without :path");
  }
  // Answered as sandgate answers a refusal: a response on the stream, which exercises the
  // session's sending side against whatever the client does next.
  const nghttp2_nv status[] = {{const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(":status")),
                                const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>("403")), 7, 3,
                                NGHTTP2_NV_FLAG_NONE}};
  nghttp2_submit_response(session, f->hd.stream_id, status, 1, nullptr);
  return 0;
}

int onClose(nghttp2_session*, int32_t id, uint32_t, void* p) {
  st(p).open.erase(id);
  st(p).heads.erase(id);
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  sandgate::config::EffectiveLimits limits;
  limits.h2MaxConcurrentStreams = 1 + data[0] % 8;
  limits.h2MaxContinuations = data[1] % 5;
  limits.h2MaxSettings = 1 + (data[1] >> 4);
  limits.h2ResetBurst = 1 + data[2] % 16;
  limits.h2ResetsPerSecond = 1 + (data[2] >> 4) % 4;
  limits.h2MaxOutboundAck = 1 + data[3] % 64;
  limits.maxHeaderBytes = 256 + (data[3] >> 6) * 5376;
  data += 4;
  size -= 4;

  State state;
  state.maxStreams = limits.h2MaxConcurrentStreams;
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_option* opt = nullptr;
  nghttp2_session* session = nullptr;
  if (nghttp2_session_callbacks_new(&cbs) != 0) return 0;
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, beginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(cbs, onHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, onFrame);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, onClose);
  if (nghttp2_option_new(&opt) == 0) {
    nghttp2_option_set_no_auto_window_update(opt, 1);
    sandgate::proxy::applyH2ClientLimits(opt, limits);
    if (nghttp2_session_server_new2(&session, cbs, &state, opt) == 0) {
      const auto settings = sandgate::proxy::h2ClientSettings(limits, NGHTTP2_INITIAL_WINDOW_SIZE);
      nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
      std::string in(kPreface);
      in.append(reinterpret_cast<const char*>(data), size);
      // Fed in pieces of 1 KiB, sending what the session has queued in between, as the
      // connection's reader and writer alternate.
      for (size_t off = 0; off < in.size();) {
        const size_t n = std::min<size_t>(1024, in.size() - off);
        const auto rv =
            nghttp2_session_mem_recv(session, reinterpret_cast<const uint8_t*>(in.data() + off), n);
        if (rv < 0) break;  // a connection error: sandgate ends the connection here
        off += static_cast<size_t>(rv);
        const uint8_t* out = nullptr;
        while (nghttp2_session_mem_send(session, &out) > 0) {
        }
        if (rv == 0) break;
      }
      nghttp2_session_del(session);
    }
    nghttp2_option_del(opt);
  }
  nghttp2_session_callbacks_del(cbs);
  return 0;
}
