// The strict chunked framing check (see chunked_framing.h).
#include "proxy/client/chunked_framing.h"

#include <fmt/format.h>

#include "proxy/client/reasons.h"

namespace sandgate::proxy {

namespace {

bool isTchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool isQdtext(unsigned char c) {
  return c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5B) ||
         (c >= 0x5D && c <= 0x7E) || c >= 0x80;
}

// What may follow a backslash in a quoted string: HTAB, SP, VCHAR, obs-text.
bool isQuotedPairChar(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7F); }

int hexValue(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A byte as a reader of the detail sees it.
std::string shown(unsigned char c) {
  if (c >= 0x21 && c <= 0x7E) return fmt::format("'{}'", static_cast<char>(c));
  return fmt::format("0x{:02x}", c);
}

}  // namespace

ChunkedFraming::Status ChunkedFraming::fail(std::string_view reason, std::string detail) {
  status_ = Status::kError;
  reason_ = reason;
  detail_ = std::move(detail);
  return status_;
}

ChunkedFraming::Status ChunkedFraming::feed(std::string_view bytes) {
  size_t i = 0;
  while (status_ == Status::kMore && i < bytes.size()) {
    if (state_ == State::kData) {
      // Data bytes are not judged: skip them all at once.
      const uint64_t take = std::min<uint64_t>(size_, bytes.size() - i);
      size_ -= take;
      i += take;
      if (size_ == 0) state_ = State::kDataCr;
      continue;
    }
    const unsigned char c = static_cast<unsigned char>(bytes[i++]);
    const bool inLine = state_ != State::kDataCr && state_ != State::kDataLf &&
                        state_ != State::kTrailerStart && state_ != State::kFinalLf;
    if (inLine && ++lineLength_ > kMaxChunkLine) {
      return fail(reason::kBadChunkedBody,
                  fmt::format("a chunk line longer than {} bytes", kMaxChunkLine));
    }
    const bool bws = c == ' ' || c == '\t';
    switch (state_) {
      case State::kSizeStart:
        if (hexValue(c) < 0) {
          return fail(reason::kBadChunkedBody,
                      fmt::format("a chunk size must start with a hex digit, not {}", shown(c)));
        }
        size_ = static_cast<uint64_t>(hexValue(c));
        state_ = State::kSize;
        break;
      case State::kSize:
        if (int v = hexValue(c); v >= 0) {
          if (size_ > (INT64_MAX >> 4)) {
            return fail(reason::kBadChunkedBody, "a chunk size that does not fit 63 bits");
          }
          size_ = (size_ << 4) | static_cast<uint64_t>(v);
        } else if (bws) {
          state_ = State::kSizeBws;
        } else if (c == ';') {
          state_ = State::kExtBws;
        } else if (c == '\r') {
          state_ = State::kLineLf;
        } else {
          return fail(reason::kBadChunkedBody,
                      fmt::format("{} in a chunk size (only hex digits)", shown(c)));
        }
        break;
      case State::kSizeBws:
      case State::kExtAfter:
        if (bws) break;
        if (c == ';') {
          state_ = State::kExtBws;
        } else if (c == '\r') {
          state_ = State::kLineLf;
        } else {
          return fail(
              reason::kBadChunkedBody,
              fmt::format("{} where a chunk extension's ';' or the line's end belongs", shown(c)));
        }
        break;
      case State::kExtBws:
        if (bws) break;
        if (!isTchar(c)) {
          return fail(reason::kBadChunkedBody,
                      fmt::format("{} where a chunk extension's name belongs", shown(c)));
        }
        state_ = State::kExtName;
        break;
      case State::kExtName:
      case State::kExtNameBws:
        if (state_ == State::kExtName && isTchar(c)) break;
        if (bws) {
          state_ = State::kExtNameBws;
        } else if (c == '=') {
          state_ = State::kExtEqBws;
        } else if (c == ';') {
          state_ = State::kExtBws;
        } else if (c == '\r') {
          state_ = State::kLineLf;
        } else {
          return fail(reason::kBadChunkedBody,
                      fmt::format("{} in a chunk extension's name", shown(c)));
        }
        break;
      case State::kExtEqBws:
        if (bws) break;
        if (c == '"') {
          state_ = State::kExtQuoted;
        } else if (isTchar(c)) {
          state_ = State::kExtToken;
        } else {
          return fail(reason::kBadChunkedBody,
                      fmt::format("{} where a chunk extension's value belongs", shown(c)));
        }
        break;
      case State::kExtToken:
        if (isTchar(c)) break;
        if (bws) {
          state_ = State::kExtAfter;
        } else if (c == ';') {
          state_ = State::kExtBws;
        } else if (c == '\r') {
          state_ = State::kLineLf;
        } else {
          return fail(reason::kBadChunkedBody,
                      fmt::format("{} in a chunk extension's value", shown(c)));
        }
        break;
      case State::kExtQuoted:
        if (c == '"') {
          state_ = State::kExtAfter;
        } else if (c == '\\') {
          state_ = State::kExtEscape;
        } else if (!isQdtext(c)) {
          return fail(reason::kBadChunkedBody,
                      fmt::format("{} inside a chunk extension's quoted value", shown(c)));
        }
        break;
      case State::kExtEscape:
        if (!isQuotedPairChar(c)) {
          return fail(reason::kBadChunkedBody,
                      fmt::format("{} escaped in a chunk extension's quoted value", shown(c)));
        }
        state_ = State::kExtQuoted;
        break;
      case State::kLineLf:
        if (c != '\n') {
          return fail(reason::kBadChunkedBody, "a CR not followed by LF in a chunk line");
        }
        lineLength_ = 0;
        state_ = size_ == 0 ? State::kTrailerStart : State::kData;
        break;
      case State::kDataCr:
        if (c != '\r') {
          return fail(reason::kBadChunkedBody, "a chunk longer than its size (no CRLF after it)");
        }
        state_ = State::kDataLf;
        break;
      case State::kDataLf:
        if (c != '\n') {
          return fail(reason::kBadChunkedBody, "a chunk's data not followed by CRLF");
        }
        state_ = State::kSizeStart;
        break;
      case State::kTrailerStart:
        if (c != '\r') {
          return fail(reason::kRequestTrailers,
                      "a trailer field after the last chunk (sandgate relays no trailers)");
        }
        state_ = State::kFinalLf;
        break;
      case State::kFinalLf:
        if (c != '\n') return fail(reason::kBadChunkedBody, "a CR not followed by LF at the end");
        status_ = Status::kDone;
        break;
      case State::kData:
        break;  // handled above
    }
  }
  return status_;
}

}  // namespace sandgate::proxy
