// A strict check of a chunked request body's framing (RFC 9112, section 7.1), run on the raw
// bytes before Beast's parser sees them. Beast accepts some malformed framing silently (an
// unterminated quoted string in a chunk extension makes it wait for more bytes forever) and
// bounds neither a chunk line nor the trailer section; here every chunk line is bounded and
// every byte of it judged, so a malformed body gets its 400 with a reason the moment its bad
// byte arrives.
//
// Accepted, exactly: chunk-size (1*HEXDIG, value below 2^63), optional BWS, chunk extensions
// (`;` name [`=` token / quoted-string], BWS around `;` and `=`), CRLF, that many data bytes,
// CRLF; the last chunk (size 0, extensions allowed), then CRLF. Refused: every other byte in a
// chunk line (a sign, `0x`, `_`, a control character, NUL, a bare CR or LF), a chunk line over
// kMaxChunkLine bytes, data not followed by CRLF (a chunk longer than its size), and any
// trailer field (reason request_trailers: sandgate relays none, and a trailer is a header that
// no check saw).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sandgate::proxy {

class ChunkedFraming {
 public:
  static constexpr size_t kMaxChunkLine = 4096;

  enum class Status { kMore, kDone, kError };

  // Judges the next bytes of the body. kDone: the body ended (bytes after its end are the next
  // request's, not judged here); kError: see reason() and detail(). Once kDone or kError, the
  // status stays and further bytes are ignored.
  Status feed(std::string_view bytes);
  Status status() const { return status_; }
  // A token of client/reasons.h (bad_chunked_body or request_trailers).
  std::string_view reason() const { return reason_; }
  const std::string& detail() const { return detail_; }

 private:
  enum class State {
    kSizeStart,     // the first hex digit of a chunk size
    kSize,          // more hex digits
    kSizeBws,       // whitespace after the size, before `;` or CR
    kExtBws,        // whitespace after `;`
    kExtName,       // an extension's name
    kExtNameBws,    // whitespace after the name, before `=`, `;` or CR
    kExtEqBws,      // whitespace after `=`
    kExtToken,      // an unquoted value
    kExtQuoted,     // inside a quoted value
    kExtEscape,     // after a backslash inside it
    kExtAfter,      // after a value: whitespace, then `;` or CR
    kLineLf,        // the LF ending a chunk line
    kData,          // chunk data
    kDataCr,        // the CR after the data
    kDataLf,        // the LF after it
    kTrailerStart,  // after the last chunk's line: CR (the end) or a trailer field
    kFinalLf,       // the LF of the final CRLF
  };

  Status fail(std::string_view reason, std::string detail);

  State state_ = State::kSizeStart;
  Status status_ = Status::kMore;
  uint64_t size_ = 0;      // the chunk size being read, then the data bytes left
  size_t lineLength_ = 0;  // bytes of the current chunk line so far
  std::string_view reason_;
  std::string detail_;
};

}  // namespace sandgate::proxy
