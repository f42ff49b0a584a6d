// Relaying one HTTP message between two connections, shared by forwarding (TCP both sides) and
// interception (TLS both sides): the head, then the body one read at a time, optionally through
// the scrubber. Each piece is written as soon as it is read, so no body is ever held whole and
// a streaming body (server-sent events) reaches the other side as the sender writes it.
// Internal to proxy/ (forward.cc, intercept_session.cc).
#pragma once

#include <algorithm>
#include <array>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "broker/body_decoder.h"
#include "broker/scrubber.h"
#include "config/config.h"
#include "proxy/client/chunked_framing.h"
#include "proxy/client/refusal.h"
#include "proxy/net/connection_pool.h"
#include "proxy/net/tls_http.h"
#include "proxy/observe/audit.h"
#include "proxy/state/server_context.h"

namespace sandgate::proxy {

// kDecode: the body's Content-Encoding could not be undone to scrub it (see BodyDecoder).
// kFraming: the request body's framing is malformed (`reason`, `detail`). kEarlyAnswer: the
// upstream spoke (an early response, or its end) before the request body was all sent; the
// rest was not sent.
enum class RelayError { kNone, kRead, kWrite, kDecode, kFraming, kEarlyAnswer };

struct RelayOutcome {
  RelayOutcome() = default;
  RelayOutcome(RelayError e, boost::beast::error_code c, std::string d = {})
      : error(e), ec(c), detail(std::move(d)) {}

  RelayError error = RelayError::kNone;
  boost::beast::error_code ec;
  std::string detail;       // kDecode, kFraming: what was wrong with the body
  std::string_view reason;  // kFraming: a token of client/reasons.h
  bool headSent = false;    // the receiver has the head: a failure can only cut the body short
};

// The HTTP steps of a relay on a stream with Asio's interface (TCP): Beast's own operations.
// For a TlsChannel, the overloads in tls_http.h are chosen instead.
template <class Stream, class Parser>
boost::asio::awaitable<std::tuple<boost::beast::error_code, size_t>> httpRead(
    Stream& s, boost::beast::flat_buffer& b, Parser& p, HttpStep step) {
  namespace http = boost::beast::http;
  if (step == HttpStep::kHeader) {
    auto r = co_await http::async_read_header(s, b, p, kUse);
    co_return r;
  }
  auto r = co_await http::async_read_some(s, b, p, kUse);
  co_return r;
}
template <class Stream, class Serializer>
boost::asio::awaitable<std::tuple<boost::beast::error_code, size_t>> httpWrite(Stream& s,
                                                                               Serializer& sr,
                                                                               HttpStep step) {
  namespace http = boost::beast::http;
  if (step == HttpStep::kHeader) {
    auto r = co_await http::async_write_header(s, sr, kUse);
    co_return r;
  }
  auto r = co_await http::async_write(s, sr, kUse);
  co_return r;
}

// Reads some bytes into `into` from a stream with Asio's interface (TCP); tls_http.h has the
// TlsChannel overload.
template <class Stream>
boost::asio::awaitable<std::tuple<boost::beast::error_code, size_t>> readBytes(
    Stream& s, boost::asio::mutable_buffer into) {
  auto r = co_await s.async_read_some(into, kUse);
  co_return r;
}

// Has the peer of a TCP stream sent something (or closed) that nobody has read? tls_http.h
// has the TlsChannel overload.
template <class Stream>
bool peerHasSpoken(Stream& s) {
  auto& socket = boost::beast::get_lowest_layer(s).socket();
  return socket.is_open() && !socketIsQuiet(socket.native_handle());
}

// Sees a response body's bytes on their way to the client, after decoding and scrubbing, and
// writes what the client gets to `out` (llm_gate.h reads an LLM call's usage there, and takes
// out the usage chunk sandgate asked for). `last`: no more bytes come.
class BodyTap {
 public:
  virtual ~BodyTap() = default;
  virtual void pass(std::string_view in, bool last, std::string& out) = 0;
};

// What the relay of a request body watches besides its bytes.
struct RequestBodyGuard {
  // A chunked body: every raw byte is judged (chunked_framing.h) before Beast parses it.
  ChunkedFraming* framing = nullptr;
  // Stop sending the body when the upstream speaks first (kEarlyAnswer): it answered without
  // waiting for the body, and the rest must not reach it as the start of another request.
  bool watchUpstream = false;
  // A body read whole and judged before the relay (llm_gate.h), which the parser has consumed:
  // it goes upstream as judged, under the head's Content-Length.
  std::optional<std::string_view> judgedBody{};
};

// Beast's read_some for a request body, with every byte read from the client judged by
// `framing` first (bytes already in `b` have been). The parse error when the framing is bad:
// http::error::bad_chunk (the caller reads `framing` for the reason).
template <class Stream, class Parser>
boost::asio::awaitable<std::tuple<boost::beast::error_code, size_t>> readCheckedBody(
    Stream& s, boost::beast::flat_buffer& b, Parser& p, ChunkedFraming& framing) {
  namespace http = boost::beast::http;
  boost::beast::error_code ec;
  while (true) {
    if (b.size() > 0) {
      const size_t n = p.put(b.data(), ec);
      b.consume(n);
      if (ec != http::error::need_more) co_return std::tuple{ec, n};
      ec = {};
    }
    const size_t size = boost::beast::read_size(b, 65536);
    if (size == 0) co_return std::tuple{boost::beast::error_code(http::error::buffer_overflow), 0};
    auto into = b.prepare(size);
    auto [rec, n] = co_await readBytes(s, into);
    if (framing.status() == ChunkedFraming::Status::kMore &&
        framing.feed(std::string_view(static_cast<const char*>(into.data()), n)) ==
            ChunkedFraming::Status::kError) {
      co_return std::tuple{boost::beast::error_code(http::error::bad_chunk), 0};
    }
    b.commit(n);
    if (rec == boost::asio::error::eof) {
      if (p.got_some()) {
        ec = {};
        p.put_eof(ec);
      } else {
        ec = http::error::end_of_stream;
      }
      co_return std::tuple{ec, 0};
    }
    if (rec) co_return std::tuple{rec, 0};
  }
}

// An ordinary end of the peer's side: EOF, reset, broken pipe, a TLS stream cut without
// close_notify, a message cut short.
bool isPeerClosed(const boost::beast::error_code& ec);

// A parse error in a body's framing (a chunk size or extension, a line too long), as opposed to
// the peer's end or a socket error.
bool isFramingError(const boost::beast::error_code& ec);

// Overwrites relay buffers that may have held a secret the scrubber replaced.
void cleanseBuffer(void* data, size_t size);
// Overwrites the target and every field value of a request head in place, before its memory is
// freed: once a credential was injected, they may hold it. The head is unusable afterwards.
void cleanseRequestHead(boost::beast::http::request_header<>& head);

// What formatMessage writes: the head alone, or the head and the whole body (as one chunk and
// the last chunk when the message is chunked: http::message::chunked()).
enum class MessagePart { kHead, kWhole, kWholeChunked };

// The message `h` as it goes on the wire: start line, fields, blank line, then `part` of
// `body`. The same bytes Beast's serializer writes for it. The string is sized once, so that
// no growth leaves a partial copy of a head (which may hold a credential) in freed memory.
std::string formatMessage(const boost::beast::http::request_header<>& h, std::string_view body,
                          MessagePart part);
std::string formatMessage(const boost::beast::http::response_header<>& h, std::string_view body,
                          MessagePart part);

// Writes all of `bytes` to a stream with Asio's interface (TCP); tls_http.h has the TlsChannel
// overload.
template <class Stream>
boost::asio::awaitable<std::tuple<boost::beast::error_code, size_t>> writeBytes(
    Stream& s, boost::asio::const_buffer bytes) {
  auto r = co_await boost::asio::async_write(s, bytes, kUse);
  co_return r;
}

// Writes a message whose whole body is in hand (or its head alone) in one write, formatted by
// formatMessage, then wipes the copy: a request head may hold the injected credential.
template <class Out, bool isRequest>
boost::asio::awaitable<boost::beast::error_code> writeMessage(
    Out& out, const boost::beast::http::header<isRequest>& h, std::string_view body,
    MessagePart part) {
  std::string flat = formatMessage(h, body, part);
  const boost::asio::const_buffer bytes(flat.data(), flat.size());
  auto [ec, n] = co_await writeBytes(out, bytes);
  cleanseBuffer(flat.data(), flat.size());
  co_return ec;
}

// Streams the message whose head `p` has parsed from `in` to `out` through serializer `sr`:
// the head first, then the body one buffer at a time as it arrives. With `decode`, every piece
// is decoded first (the head must already say nothing of the coding, and be framed for a
// length that changes); with `scrub`, every piece then passes through the scrubber (it holds
// back only a tail that may still become a secret).
template <bool isRequest, class In, class Out>
boost::asio::awaitable<RelayOutcome> relayMessage(
    In& in, boost::beast::flat_buffer& inBuf,
    boost::beast::http::parser<isRequest, boost::beast::http::buffer_body>& p, Out& out,
    boost::beast::http::serializer<isRequest, boost::beast::http::buffer_body>& sr,
    broker::Scrubber* scrub, config::Seconds readTimeout, config::Seconds writeTimeout,
    uint64_t& bytes, broker::BodyDecoder* decode = nullptr, RequestBodyGuard* guard = nullptr,
    BodyTap* tap = nullptr) {
  namespace http = boost::beast::http;
  ChunkedFraming* framing = guard ? guard->framing : nullptr;
  // A body that has arrived whole with the head (a small response, usually) leaves with the
  // head in one write: one TLS record, one send. Any other head goes out at once, so that the
  // receiver of a streaming body (server-sent events) is not kept waiting for its first piece.
  const auto remaining = p.content_length_remaining();
  const bool bodyBuffered = p.is_done() || (remaining && inBuf.size() >= *remaining);
  if (!bodyBuffered) {
    boost::beast::get_lowest_layer(out).expires_after(toDuration(writeTimeout));
    if (auto [ec, n] = co_await httpWrite(out, sr, HttpStep::kHeader); ec) {
      co_return RelayOutcome{RelayError::kWrite, ec};
    }
  }
  bool headSent = !bodyBuffered;
  std::array<char, 16 * 1024> buf;
  size_t used = 0;  // how much of buf has ever held upstream bytes
  std::string emitted;
  // May hold a secret before the scrubber replaces it: wiped at the end, and sized once for
  // the most a decoder gives at a time, so that no growth frees a copy unwiped.
  std::string decoded;
  if (decode) decoded.reserve(broker::BodyDecoder::kMaxOutput);
  std::string tapped;
  bool finished = false;
  RelayOutcome result;
  while (!sr.is_done()) {
    auto& body = p.get().body();
    emitted.clear();
    size_t n = 0;
    // A decoder with output left from the last piece gives it before more is read.
    const bool draining = decode && decode->pending();
    if (!p.is_done() && !draining) {
      body.data = buf.data();
      body.size = buf.size();
      boost::beast::get_lowest_layer(in).expires_after(toDuration(readTimeout));
      auto [ec, r] = framing ? co_await readCheckedBody(in, inBuf, p, *framing)
                             : co_await httpRead(in, inBuf, p, HttpStep::kSome);
      if (ec == http::error::need_buffer) ec = {};
      if (ec && framing && framing->status() == ChunkedFraming::Status::kError) {
        result = RelayOutcome{RelayError::kFraming, ec, framing->detail()};
        result.reason = framing->reason();
        break;
      }
      if (ec && guard && isFramingError(ec)) {
        result = RelayOutcome{RelayError::kFraming, ec, "the body's framing: " + ec.message()};
        result.reason = reason::kBadChunkedBody;
        break;
      }
      if (ec) {
        result = RelayOutcome{RelayError::kRead, ec};
        break;
      }
      n = buf.size() - body.size;
      used = std::max(used, n);
      bytes += n;
    }
    std::string_view piece(buf.data(), n);
    if (guard && guard->judgedBody && p.is_done()) {
      piece = *guard->judgedBody;
      bytes += piece.size();
    }
    if (decode) {
      decoded.clear();
      if (!decode->decode(piece, decoded)) {
        result = RelayOutcome{RelayError::kDecode,
                              {},
                              "not valid " + std::string(decode->name()) + ": " + decode->error()};
        break;
      }
      if (p.is_done() && !decode->pending() && !decode->complete()) {
        result = RelayOutcome{
            RelayError::kDecode, {}, "the " + std::string(decode->name()) + " stream ends early"};
        break;
      }
      piece = decoded;
    }
    const bool last = p.is_done() && !(decode && decode->pending());
    if (scrub) {
      scrub->feed(piece, emitted);
      if (last && !finished) {
        scrub->finish(emitted);
        finished = true;
      }
      body.data = emitted.empty() ? nullptr : emitted.data();
      body.size = emitted.size();
    } else {
      // An empty piece must not reach the serializer as data: in chunked framing a
      // zero-length chunk is the end of the body.
      body.data = piece.empty() ? nullptr : const_cast<char*>(piece.data());
      body.size = piece.size();
    }
    if (tap) {
      tapped.clear();
      tap->pass(std::string_view(static_cast<const char*>(body.data), body.size), last, tapped);
      body.data = tapped.empty() ? nullptr : tapped.data();
      body.size = tapped.size();
    }
    body.more = !last;
    boost::beast::get_lowest_layer(out).expires_after(toDuration(writeTimeout));
    if (last && !headSent) {
      // The whole message is in hand (a request without a body, a small response): it is
      // formatted here rather than walked through the serializer's buffer sequence.
      const std::string_view whole(static_cast<const char*>(body.data), body.size);
      const auto& head = p.get().base();
      const MessagePart part = p.get().chunked() ? MessagePart::kWholeChunked : MessagePart::kWhole;
      auto ec = co_await writeMessage(out, head, whole, part);
      headSent = true;
      if (ec) result = RelayOutcome{RelayError::kWrite, ec};
      break;
    }
    if (guard && guard->watchUpstream && headSent && peerHasSpoken(out)) {
      result = RelayOutcome{RelayError::kEarlyAnswer, {}};
      break;
    }
    auto [ec, w] = co_await httpWrite(out, sr, HttpStep::kWhole);
    headSent = true;
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      result = RelayOutcome{RelayError::kWrite, ec};
      break;
    }
  }
  // The raw upstream bytes may hold a secret the scrubber just replaced.
  if (scrub) cleanseBuffer(buf.data(), used);
  if (decode) broker::wipe(decoded);
  result.headSent = headSent;
  co_return result;
}

// Reads a response head from `in` into a fresh `rp`, dropping interim 1xx responses (sandgate
// answers 100-continue itself); a 101 is returned like a final response. The upstream's reason
// phrase is dropped: the response is relayed with the standard one for its status code.
template <class Stream>
boost::asio::awaitable<boost::beast::error_code> readResponseHead(
    Stream& in, boost::beast::flat_buffer& buf, std::optional<ResponseParser>& rp, bool headRequest,
    uint64_t headerLimit, config::Seconds timeout) {
  namespace http = boost::beast::http;
  while (true) {
    rp.emplace();
    rp->header_limit(static_cast<uint32_t>(std::min<uint64_t>(headerLimit, UINT32_MAX)));
    rp->body_limit(boost::none);
    if (headRequest) rp->skip(true);
    boost::beast::get_lowest_layer(in).expires_after(toDuration(timeout));
    auto [ec, n] = co_await httpRead(in, buf, *rp, HttpStep::kHeader);
    if (ec) co_return ec;
    int status = rp->get().result_int();
    if (status >= 100 && status < 200 && status != 101) continue;
    // The reason phrase is the upstream's free text, and some servers put request data there
    // ("401 invalid token Bearer sk-..."), where no scrubber looks. Clients ignore it (RFC
    // 9112, section 4): every relayed response gets the standard phrase for its code instead
    // (an empty reason makes Beast's writer and formatMessage write obsolete_reason()).
    rp->get().reason({});
    co_return boost::beast::error_code{};
  }
}

// Frames a final response (hop-by-hop fields already removed) for a client speaking HTTP/1.
// `clientVersion`: an HTTP/1.0 client gets no chunks, the close ends the body. A body whose
// length may change (`lengthMayChange`: scrubbing) or that the upstream ends by closing is
// re-chunked for an HTTP/1.1 client. Returns whether the client connection may stay open.
bool frameResponse(ResponseParser& rp, unsigned clientVersion, bool clientKeepAlive,
                   bool lengthMayChange);

// Sends the response that `rp` has the head of from `up` to `client`: the head alone when it
// has no body, else the head and the streamed body. A failure is recorded in `rec` (an upstream
// read as upstream_timeout/upstream_reset, a client write as the error).
template <class Up, class Client>
boost::asio::awaitable<RelayOutcome> relayResponse(
    Up& up, boost::beast::flat_buffer& upBuf, ResponseParser& rp, Client& client,
    broker::Scrubber* scrub, const config::EffectiveLimits& limits, AuditRecord& rec,
    broker::BodyDecoder* decode = nullptr, BodyTap* tap = nullptr);

// Records in `rec` how relaying a response failed (nothing when it did not).
void noteResponseFailure(const RelayOutcome& back, AuditRecord& rec);
// Records a request whose body could not be read from the client (it timed out or left).
void noteClientReadFailure(const RelayOutcome& sent, AuditRecord& rec);
// The 502 for a request that could not be written to the upstream.
Refusal upstreamSendRefusal(const RelayOutcome& sent, const AuditRecord& rec);
// The 502 for a response whose encoded body did not decode (kDecode) before any of it was sent.
Refusal undecodableBodyRefusal(const RelayOutcome& back, const AuditRecord& rec);

template <class Up, class Client>
boost::asio::awaitable<RelayOutcome> relayResponse(Up& up, boost::beast::flat_buffer& upBuf,
                                                   ResponseParser& rp, Client& client,
                                                   broker::Scrubber* scrub,
                                                   const config::EffectiveLimits& limits,
                                                   AuditRecord& rec, broker::BodyDecoder* decode,
                                                   BodyTap* tap) {
  namespace http = boost::beast::http;
  RelayOutcome back;
  if (rp.is_done()) {
    boost::beast::get_lowest_layer(client).expires_after(toDuration(limits.bodyTimeout));
    const auto& head = rp.get().base();
    const std::string_view noBody;
    auto ec = co_await writeMessage(client, head, noBody, MessagePart::kHead);
    if (ec) back = RelayOutcome{RelayError::kWrite, ec};
    back.headSent = true;
  } else {
    http::response_serializer<http::buffer_body> sr(rp.get());
    back = co_await relayMessage(up, upBuf, rp, client, sr, scrub, limits.idleTimeout,
                                 limits.bodyTimeout, rec.bytesDown, decode, nullptr, tap);
  }
  noteResponseFailure(back, rec);
  co_return back;
}

}  // namespace sandgate::proxy
