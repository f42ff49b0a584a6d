// nghttp2's callbacks for both sessions of an HTTP/2 interception, and the making of those
// sessions (shared with fuzz/h2_streams_fuzz.cc): the frames that drive each
// stream (see h2_stream_state.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "proxy/h2/h2_limits.h"
#include "proxy/h2/h2_stream_state.h"

namespace sandgate::proxy {

namespace {

H2Streams& self(void* p) { return *static_cast<H2Streams*>(p); }

}  // namespace

// --- the client's session ---
int H2Callbacks::beginHeaders(nghttp2_session*, const nghttp2_frame* f, void* p) {
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  H2Streams& h = self(p);
  auto s = std::make_unique<H2Stream>(f->hd.stream_id);
  identifyRequest(h.c_, s->log);
  auto& rec = s->log.record;
  rec.time = std::chrono::system_clock::now();
  rec.kind = audit_kind::kIntercept;
  rec.client = h.c_.client;
  rec.listener = h.c_.listener->name;
  rec.task = h.c_.task->name;
  rec.scheme = "https";
  rec.host = h.target_.name;
  rec.port = h.port_;
  h.streams_[f->hd.stream_id] = std::move(s);
  return 0;
}
int H2Callbacks::clientHeader(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name,
                              size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                              void* p) {
  H2Stream* s = self(p).find(f->hd.stream_id);
  if (!s) return 0;
  if (f->headers.cat != NGHTTP2_HCAT_REQUEST) {
    s->trailersSent = true;
    return 0;
  }
  // Counted as SETTINGS_MAX_HEADER_LIST_SIZE counts (RFC 9113 §6.5.2): an HPACK bomb
  // stops being stored at the limit however much it decompresses to.
  s->headBytes += namelen + valuelen + 32;
  if (s->headBytes > self(p).c_.limits().maxHeaderBytes) {
    s->headTooLarge = true;
    return 0;
  }
  s->fields.emplace_back(std::string(reinterpret_cast<const char*>(name), namelen),
                         std::string(reinterpret_cast<const char*>(value), valuelen));
  return 0;
}
int H2Callbacks::clientFrame(nghttp2_session*, const nghttp2_frame* f, void* p) {
  H2Streams& h = self(p);
  H2Stream* s = h.find(f->hd.stream_id);
  if (!s) return 0;
  const bool end = f->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
    s->reqEnded = end;
    h.onRequestHead(*s);
    return 0;
  }
  if (f->hd.type == NGHTTP2_HEADERS && s->trailersSent && !s->discard) {
    // Request trailers are not relayed (as in HTTP/1.1: request_trailers).
    Refusal r{.status = 400,
              .reason = reason::kRequestTrailers,
              .detail = "a request with trailer fields (none are relayed)"};
    if (s->responded) {
      h.resetStream(*s, NGHTTP2_REFUSED_STREAM, r.detail);
    } else {
      h.refuseStream(*s, r);
    }
    return 0;
  }
  if ((f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) && end) {
    h.onRequestEnd(*s);
  }
  return 0;
}
int H2Callbacks::clientData(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                            size_t len, void* p) {
  H2Streams& h = self(p);
  H2Stream* s = h.find(id);
  if (!s || s->discard || !s->judged) {
    nghttp2_session_consume(session, id, len);
    return 0;
  }
  s->upBody.append(reinterpret_cast<const char*>(data), len);
  if (s->holding) {
    // Judged as a form over the limit once it fills the stream's window: the client cannot
    // send more until sandgate returns window, which it does only once the body goes upstream.
    const size_t limit = std::min<size_t>(s->req->formLimit(), kH2StreamWindow);
    if (s->upBody.size() >= limit) h.releaseHold(*s, false);
  } else if (s->upId) {
    nghttp2_session_resume_data(h.upstreamSession(), s->upId);
  }
  return 0;
}
int H2Callbacks::clientClose(nghttp2_session*, int32_t id, uint32_t code, void* p) {
  self(p).closeStream(id, code);
  return 0;
}
// The response body to the client (the upstream's, scrubbed, or a refusal's).
ssize_t H2Callbacks::readDown(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length,
                              uint32_t* flags, nghttp2_data_source*, void* p) {
  H2Streams& h = self(p);
  H2Stream* s = h.find(id);
  if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  h.produceDown(*s);
  const size_t n = std::min(length, s->downBody.size());
  if (n == 0 && !s->scrubDone) return NGHTTP2_ERR_DEFERRED;
  std::memcpy(buf, s->downBody.data(), n);
  s->downBody.erase(0, n);
  s->log.record.bytesDown += n;
  h.produceDown(*s);
  if (s->downBody.empty() && s->scrubDone) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (s->haveTrailers) {
      h2ScrubTrailers(s->scrubber, s->resFields);
      auto v = nvs(s->resFields, NGHTTP2_NV_FLAG_NONE);
      if (nghttp2_submit_trailer(session, id, v.data(), v.size()) == 0) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
    }
  }
  return static_cast<ssize_t>(n);
}

// --- the upstream's session ---
int H2Callbacks::upHeader(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name,
                          size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* p) {
  H2Stream* s = self(p).findUp(f->hd.stream_id);
  if (!s || f->hd.type != NGHTTP2_HEADERS) return 0;
  if (f->headers.cat == NGHTTP2_HCAT_HEADERS && !s->haveTrailers && s->responded) {
    s->resFields.clear();  // the head went out: these are its trailers
    s->resBytes = 0;
    s->haveTrailers = true;
  }
  s->resBytes += namelen + valuelen + 32;
  if (s->resBytes > self(p).c_.limits().maxHeaderBytes) {
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // resets the upstream's stream
  }
  s->resFields.emplace_back(std::string(reinterpret_cast<const char*>(name), namelen),
                            std::string(reinterpret_cast<const char*>(value), valuelen));
  return 0;
}
int H2Callbacks::upFrame(nghttp2_session*, const nghttp2_frame* f, void* p) {
  H2Streams& h = self(p);
  if (f->hd.type == NGHTTP2_GOAWAY) h.upGoaway_ = true;
  H2Stream* s = h.findUp(f->hd.stream_id);
  if (!s) return 0;
  const bool end = f->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (f->hd.type == NGHTTP2_HEADERS && !s->responded) {
    h.onResponseHead(*s, end);
  } else if (f->hd.type == NGHTTP2_HEADERS || (f->hd.type == NGHTTP2_DATA && end)) {
    if (end) h.onUpstreamEnd(*s);
  }
  return 0;
}
int H2Callbacks::upData(nghttp2_session*, uint8_t, int32_t upId, const uint8_t* data, size_t len,
                        void* p) {
  H2Streams& h = self(p);
  H2Stream* s = h.findUp(upId);
  if (!s || !s->responded || s->discard) {
    nghttp2_session_consume(h.upstreamSession(), upId, len);
    return 0;
  }
  s->rawDown.append(reinterpret_cast<const char*>(data), len);
  h.produceDown(*s);
  nghttp2_session_resume_data(h.clientSession(), s->id);
  return 0;
}
int H2Callbacks::upClose(nghttp2_session*, int32_t upId, uint32_t code, void* p) {
  H2Streams& h = self(p);
  --h.upOpen_;
  H2Stream* s = h.findUp(upId);
  h.byUp_.erase(upId);
  if (!s) return 0;
  s->upId = 0;
  if (s->upEnded || s->discard) return 0;
  const std::string why =
      fmt::format("the upstream reset the stream: {}", nghttp2_http2_strerror(code));
  if (!s->responded) {
    UpstreamResponseFailure failure{.closed = true, .error = nghttp2_http2_strerror(code)};
    Refusal r = upstreamResponseRefusal(failure, s->log.record.task, s->log.record.host,
                                        s->log.record.rule, h.upstreamAddress());
    h.refuseStream(*s, r);
  } else {
    h.resetStream(*s, code == NGHTTP2_NO_ERROR ? uint32_t{NGHTTP2_INTERNAL_ERROR} : code, why);
  }
  return 0;
}
// The request body to the upstream.
ssize_t H2Callbacks::readUp(nghttp2_session*, int32_t upId, uint8_t* buf, size_t length,
                            uint32_t* flags, nghttp2_data_source*, void* p) {
  H2Streams& h = self(p);
  H2Stream* s = h.findUp(upId);
  if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  const size_t n = std::min(length, s->upBody.size());
  if (n == 0 && !s->reqEnded) return NGHTTP2_ERR_DEFERRED;
  std::memcpy(buf, s->upBody.data(), n);
  s->upBody.erase(0, n);
  s->log.record.bytesUp += n;
  nghttp2_session_consume(h.clientSession(), s->id, n);
  if (s->upBody.empty() && s->reqEnded) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

void H2Streams::installClientCallbacks(nghttp2_session_callbacks* cbs) {
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, &H2Callbacks::beginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(cbs, &H2Callbacks::clientHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &H2Callbacks::clientFrame);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &H2Callbacks::clientData);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &H2Callbacks::clientClose);
}

void H2Streams::installUpstreamCallbacks(nghttp2_session_callbacks* cbs) {
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, nullptr);
  nghttp2_session_callbacks_set_on_header_callback(cbs, &H2Callbacks::upHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &H2Callbacks::upFrame);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &H2Callbacks::upData);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &H2Callbacks::upClose);
}

namespace {

// nghttp2's callbacks and options for one session, freed when it has been made.
struct SessionSetup {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_option* opt = nullptr;
  ~SessionSetup() {
    if (opt) nghttp2_option_del(opt);
    if (cbs) nghttp2_session_callbacks_del(cbs);
  }
  int init() {
    int rv = nghttp2_session_callbacks_new(&cbs);
    if (rv == 0) rv = nghttp2_option_new(&opt);
    if (rv != 0) return rv;
    // Flow control is passed through: a byte's window goes back only once the other leg took
    // it (h2_proxy.cc).
    nghttp2_option_set_no_auto_window_update(opt, 1);
    // Pushed streams would be responses to requests the policy never saw.
    nghttp2_option_set_max_reserved_remote_streams(opt, 0);
    return 0;
  }
};

}  // namespace

int H2Streams::newClientSession(nghttp2_session** out) {
  const auto& limits = c_.limits();
  SessionSetup setup;
  if (int rv = setup.init()) return rv;
  installClientCallbacks(setup.cbs);
  // The client's side: HTTP messaging stays on (RFC 9113 §8 checks), and the floods of the
  // 2019 and 2023-2024 advisories are bounded by the session, as the task's limits say
  // (h2_limits.h: the h2_* keys of `limits:`).
  applyH2ClientLimits(setup.opt, limits);
  if (int rv =
          nghttp2_session_server_new2(out, setup.cbs, static_cast<H2Streams*>(this), setup.opt)) {
    return rv;
  }
  const auto toClient = h2ClientSettings(limits, kH2StreamWindow);
  if (int rv = nghttp2_submit_settings(*out, NGHTTP2_FLAG_NONE, toClient.data(), toClient.size()))
    return rv;
  return nghttp2_session_set_local_window_size(*out, NGHTTP2_FLAG_NONE, 0, kH2ConnectionWindow);
}

int H2Streams::newUpstreamSession(nghttp2_session** out) {
  SessionSetup setup;
  if (int rv = setup.init()) return rv;
  installUpstreamCallbacks(setup.cbs);
  if (int rv =
          nghttp2_session_client_new2(out, setup.cbs, static_cast<H2Streams*>(this), setup.opt)) {
    return rv;
  }
  const uint32_t headerList =
      static_cast<uint32_t>(std::min<uint64_t>(c_.limits().maxHeaderBytes, UINT32_MAX));
  const nghttp2_settings_entry toUpstream[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kH2StreamWindow},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, headerList}};
  if (int rv = nghttp2_submit_settings(*out, NGHTTP2_FLAG_NONE, toUpstream, 3)) return rv;
  return nghttp2_session_set_local_window_size(*out, NGHTTP2_FLAG_NONE, 0, kH2ConnectionWindow);
}

}  // namespace sandgate::proxy
