// Fuzzes the chunked decoding of request bodies: Beast's request_parser<buffer_body>, run as
// proxy/forward and proxy/intercept run it (the head limit of config::Limits, no body limit, a
// fixed buffer the body is read into piece by piece), on input split at random points.
//
// Two modes, chosen by the first byte:
//  0. Round trip: a body and a way of encoding it (chunk sizes, hex case, leading zeros,
//     extensions) come from the input; the encoding is valid (RFC 9112 section 7.1). The parser
//     must give back exactly the body and stop exactly at the end of the message: the next
//     pipelined request is not part of it.
//  1. Raw: the input is the body of a chunked request. Where a strict decoder written from RFC
//     9112 (no trailers, sizes that fit 63 bits) accepts it, Beast must end the body at the
//     same byte with the same content; two readings of where a body ends is request
//     smuggling. Beast accepts more than the strict grammar (issue #24 item 1: the proxy is to
//     refuse those); set SANDGATE_FUZZ_STRICT_CHUNKS=1 to stop at the first such input.
// Where the tree has proxy/client/chunked_framing (the check that refuses them before Beast
// parses), both modes also feed it: its verdict does not depend on the split, it accepts
// exactly the strict grammar (short of its chunk line bound) and ends the body at the same byte,
// and Beast reads every body it accepts to the same end.
#include <fuzzer/FuzzedDataProvider.h>

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/check.h"

// proxy/client/chunked_framing (sandgate's own check of a chunked body, run before Beast's
// parser) is fuzzed here too where the tree has it.
#if __has_include("proxy/client/chunked_framing.h")
#include "proxy/client/chunked_framing.h"
#define SANDGATE_FUZZ_CHUNKED_FRAMING 1
#endif

namespace {

namespace http = boost::beast::http;

constexpr size_t kHeaderLimit = 64 * 1024;  // config::Limits::maxHeaderBytes' default
constexpr std::string_view kHead =
    "POST /upload HTTP/1.1\r\nHost: example.test\r\nTransfer-Encoding: chunked\r\n\r\n";
constexpr std::string_view kNext = "GET /next HTTP/1.1\r\nHost: example.test\r\n\r\n";

struct Parsed {
  bool done = false;     // the parser reached the end of the message
  std::string body;      // what it decoded
  size_t consumed = 0;   // bytes of the wire it took (head included)
};

// Feeds `wire` to the parser `pieces` bytes at a time (cycling), with a body buffer of
// `bufSize` bytes, the way relayMessage reads: put() what has arrived, take the body bytes out
// of the buffer, give more when the parser needs more.
Parsed parse(std::string_view wire, const std::vector<size_t>& pieces, size_t bufSize) {
  http::request_parser<http::buffer_body> p;
  p.header_limit(kHeaderLimit);
  p.body_limit(boost::none);
  std::vector<char> buf(bufSize);
  Parsed out;
  size_t pos = 0, end = 0, k = 0;
  auto more = [&] {
    if (end >= wire.size()) return false;
    end = std::min(wire.size(), end + pieces[k++ % pieces.size()]);
    return true;
  };
  more();
  // Each round either consumes input, yields body bytes or extends the window: bounded.
  for (size_t rounds = 0; rounds < 4 * wire.size() + 64; ++rounds) {
    // The body buffer exists once the head is parsed (put() stops after the head).
    const bool reading = p.is_header_done();
    if (reading) {
      p.get().body().data = buf.data();
      p.get().body().size = buf.size();
    }
    boost::beast::error_code ec;
    const size_t n = p.put(boost::asio::buffer(wire.data() + pos, end - pos), ec);
    if (reading) out.body.append(buf.data(), buf.size() - p.get().body().size);
    pos += n;
    if (p.is_done()) {
      out.done = true;
      out.consumed = pos;
      return out;
    }
    if (ec == http::error::need_buffer) continue;
    if (ec == http::error::need_more || (!ec && n == 0)) {
      if (!more()) return out;  // the input ends inside the message
      continue;
    }
    if (ec) return out;
    if (pos == end && !more()) return out;
  }
  SANDGATE_FUZZ_CHECK(false, "the parser makes progress on every put");
  return out;
}

bool isTchar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}
int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 9112 section 7.1, strictly: chunk-size is 1*HEXDIG whose value fits 63 bits, chunk-ext
// is *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ), so whitespace never
// comes right before the CRLF (proxy/client/chunked_framing refuses it there too), every line
// ends in CRLF, and no trailer field
// (sandgate refuses request trailers). Returns the body and the bytes the chunked body took, or
// nullopt.
std::optional<std::pair<std::string, size_t>> strictDecode(std::string_view in) {
  std::string body;
  size_t i = 0;
  auto ows = [&] {
    while (i < in.size() && (in[i] == ' ' || in[i] == '\t')) ++i;
  };
  auto tokenAt = [&] {
    size_t start = i;
    while (i < in.size() && isTchar(static_cast<unsigned char>(in[i]))) ++i;
    return i > start;
  };
  auto crlf = [&] {
    if (in.substr(i, 2) != "\r\n") return false;
    i += 2;
    return true;
  };
  while (true) {
    uint64_t size = 0;
    size_t digits = 0;
    for (; i < in.size() && hex(in[i]) >= 0; ++i, ++digits) {
      if (size > (INT64_MAX >> 4)) return std::nullopt;
      size = size << 4 | static_cast<uint64_t>(hex(in[i]));
    }
    if (digits == 0) return std::nullopt;
    while (true) {  // chunk-ext
      const size_t beforeBws = i;
      ows();
      if (i >= in.size() || in[i] != ';') {
        i = beforeBws;  // BWS only before a ';': the CRLF must follow at once
        break;
      }
      ++i;
      ows();
      if (!tokenAt()) return std::nullopt;
      const size_t save = i;
      ows();
      if (i < in.size() && in[i] == '=') {
        ++i;
        ows();
        if (i < in.size() && in[i] == '"') {
          for (++i;; ++i) {
            if (i >= in.size()) return std::nullopt;
            auto c = static_cast<unsigned char>(in[i]);
            if (c == '"') break;
            if (c == '\\') {
              if (++i >= in.size()) return std::nullopt;
              c = static_cast<unsigned char>(in[i]);
              if (c != '\t' && (c < 0x20 || c == 0x7f)) return std::nullopt;
              continue;
            }
            if (c != '\t' && (c < 0x20 || c == 0x7f)) return std::nullopt;
          }
          ++i;
        } else if (!tokenAt()) {
          return std::nullopt;
        }
      } else {
        i = save;
      }
    }
    if (!crlf()) return std::nullopt;
    if (size == 0) break;
    if (size > in.size() - i) return std::nullopt;
    body.append(in.substr(i, size));
    i += size;
    if (!crlf()) return std::nullopt;
  }
  if (!crlf()) return std::nullopt;  // no trailer section: the blank line at once
  return std::make_pair(std::move(body), i);
}

#ifdef SANDGATE_FUZZ_CHUNKED_FRAMING
using sandgate::proxy::ChunkedFraming;

struct Framed {
  ChunkedFraming::Status status = ChunkedFraming::Status::kMore;
  size_t end = 0;  // one past the body's last byte, when kDone
  std::string_view reason;
};

// The framing check fed one byte at a time (so that where it ends is known), and in `pieces`.
Framed frame(std::string_view body, const std::vector<size_t>& pieces) {
  Framed out;
  ChunkedFraming byByte;
  for (size_t i = 0; i < body.size() && byByte.status() == ChunkedFraming::Status::kMore; ++i) {
    if (byByte.feed(body.substr(i, 1)) == ChunkedFraming::Status::kDone) out.end = i + 1;
  }
  out.status = byByte.status();
  out.reason = byByte.reason();
  ChunkedFraming split;
  for (size_t at = 0, k = 0; at < body.size();) {
    const size_t n = std::min(body.size() - at, pieces[k++ % pieces.size()]);
    split.feed(body.substr(at, n));
    at += n;
  }
  SANDGATE_FUZZ_CHECK(split.status() == out.status && split.reason() == out.reason,
                      "the framing verdict does not depend on how the body arrives");
  return out;
}

// Does any line (CRLF-less run) reach the framing's chunk line bound? Then the strict grammar,
// which has no bound, may accept what the framing rightly refuses.
bool longLine(std::string_view body) {
  size_t run = 0;
  for (char c : body) {
    run = c == '\n' ? 0 : run + 1;
    if (run + 8 >= ChunkedFraming::kMaxChunkLine) return true;
  }
  return false;
}
#endif

std::vector<size_t> consumePieces(FuzzedDataProvider& in) {
  std::vector<size_t> pieces;
  const size_t count = in.ConsumeIntegralInRange<size_t>(1, 8);
  for (size_t i = 0; i < count; ++i) pieces.push_back(in.ConsumeIntegralInRange<size_t>(1, 300));
  return pieces;
}

void roundTrip(FuzzedDataProvider& in) {
  const auto pieces = consumePieces(in);
  const size_t bufSize = in.ConsumeIntegralInRange<size_t>(1, 512);
  const bool upper = in.ConsumeBool();
  const bool pipelined = in.ConsumeBool();
  std::string body = in.ConsumeRandomLengthString(4096);
  std::string wire(kHead);
  auto ext = [&] {
    switch (in.ConsumeIntegralInRange(0, 3)) {
      case 1:
        return std::string(";x");
      case 2:
        return std::string(";name=value");
      case 3:
        return std::string(";q=\"a b\\\"c\"");
      default:
        return std::string();
    }
  };
  auto size = [&](size_t n) {
    std::string digits(in.ConsumeIntegralInRange(0, 3), '0');
    char tmp[32];
    std::snprintf(tmp, sizeof tmp, upper ? "%zX" : "%zx", n);
    return digits + tmp;
  };
  for (size_t at = 0; at < body.size();) {
    const size_t n = in.ConsumeIntegralInRange<size_t>(1, body.size() - at);
    wire += size(n) + ext() + "\r\n";
    wire.append(body, at, n);
    wire += "\r\n";
    at += n;
  }
  wire += size(0) + ext() + "\r\n\r\n";
  const size_t messageEnd = wire.size();
  if (pipelined) wire += kNext;
  const Parsed got = parse(wire, pieces, bufSize);
  SANDGATE_FUZZ_CHECK(got.done, "a valid chunked body is read to its end");
  SANDGATE_FUZZ_CHECK(got.body == body, "the decoded body is the body that was encoded");
  SANDGATE_FUZZ_CHECK(got.consumed == messageEnd, "the message ends where its last chunk does");
#ifdef SANDGATE_FUZZ_CHUNKED_FRAMING
  const Framed f = frame(std::string_view(wire).substr(kHead.size()), pieces);
  SANDGATE_FUZZ_CHECK(f.status == ChunkedFraming::Status::kDone, "the framing accepts it");
  SANDGATE_FUZZ_CHECK(kHead.size() + f.end == messageEnd, "and ends it at the last chunk");
#endif
}

void raw(FuzzedDataProvider& in) {
  const auto pieces = consumePieces(in);
  const size_t bufSize = in.ConsumeIntegralInRange<size_t>(1, 512);
  const std::string chunked = in.ConsumeRemainingBytesAsString();
  const std::string wire = std::string(kHead) + chunked;
  const Parsed got = parse(wire, pieces, bufSize);
  if (got.done) {
    SANDGATE_FUZZ_CHECK(got.consumed >= kHead.size() && got.consumed <= wire.size(),
                        "the parser took bytes it was given");
    SANDGATE_FUZZ_CHECK(got.body.size() <= chunked.size(), "no body larger than its encoding");
  }
  const auto strict = strictDecode(chunked);
  if (strict && got.done) {
    SANDGATE_FUZZ_CHECK(got.body == strict->first, "Beast decodes what the grammar says");
    SANDGATE_FUZZ_CHECK(got.consumed == kHead.size() + strict->second,
                        "Beast ends the body where the grammar does");
  }
#ifdef SANDGATE_FUZZ_CHUNKED_FRAMING
  // What the framing check lets through is what Beast then parses and the relay forwards: the
  // framing must accept exactly the strict grammar, and Beast must end that body at its end.
  const Framed f = frame(chunked, pieces);
  const bool done = f.status == ChunkedFraming::Status::kDone;
  if (done) {
    SANDGATE_FUZZ_CHECK(strict.has_value(), "the framing accepts only the strict grammar");
    SANDGATE_FUZZ_CHECK(f.end == strict->second, "and ends the body where the grammar does");
    SANDGATE_FUZZ_CHECK(got.done, "Beast reads a body the framing accepted");
  } else if (strict && !longLine(chunked)) {
    SANDGATE_FUZZ_CHECK(false, "the framing accepts the strict grammar");
  }
#endif
  static const bool strictOnly = std::getenv("SANDGATE_FUZZ_STRICT_CHUNKS") != nullptr;
  if (strictOnly) {
    SANDGATE_FUZZ_CHECK(!(got.done && !strict), "Beast accepts a body the strict grammar refuses");
    SANDGATE_FUZZ_CHECK(!(strict && !got.done), "Beast refuses a body the strict grammar accepts");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  if (in.ConsumeIntegralInRange(0, 1) == 0) {
    roundTrip(in);
  } else {
    raw(in);
  }
  return 0;
}
