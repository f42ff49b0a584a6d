// Strict validation of a raw HTTP/1.x request head before anything else reads it (pure).
//
// Beast's parser is lenient where a proxy must not be (it unfolds obs-fold, lets
// Transfer-Encoding override Content-Length, ...): two parties that frame one message
// differently is how request smuggling starts, so every ambiguity is refused here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/client/reasons.h"

namespace sandgate::proxy {

enum class TargetForm { kAuthority, kAbsolute, kOrigin, kAsterisk };

// What the session needs from a valid head; views point into the validated text.
struct RequestHead {
  std::string_view method;
  TargetForm form = TargetForm::kOrigin;
  std::string_view host;          // authority host as written (brackets removed for IPv6)
  uint16_t port = 0;              // explicit or the scheme default (80)
  std::string_view path;          // absolute-form: path without query ("/" when empty)
  std::string_view pathAndQuery;  // as written after the authority (may be "" or "?q")
  std::optional<std::string_view> proxyAuthorization;
  std::optional<std::string_view> hostField;  // the Host field's value, when there is one
  bool hasBody = false;                       // Content-Length > 0 or chunked
  int versionMinor = 1;                       // HTTP/1.x
};

struct HeadError {
  std::string_view reason;
  std::string detail;
};

// Validates `head` (request line, fields and the final CRLFCRLF) and extracts the target.
// Refuses: bare LF/CR, obs-fold, control characters, malformed field names, duplicate or
// non-numeric Content-Length, Content-Length with Transfer-Encoding, Transfer-Encoding whose
// last coding is not chunked, more than one Host or Proxy-Authorization, CONNECT targets that
// are not host:port, CONNECT with a body, absolute-form URIs with another scheme, userinfo,
// '\\', '#', '%' or non-ASCII in the authority, ports outside 1..65535, and an absolute URI
// whose authority disagrees with Host. Origin-form is parsed (the caller refuses it).
std::optional<HeadError> validateRequestHead(std::string_view head, RequestHead* out);

// Offset one past the "\r\n\r\n" that ends a head in `data`, 0 when not complete yet, or
// -1 when the bytes cannot be an HTTP/1 head (a bare LF or CR outside a CRLF pair).
// `from` is where the previous scan stopped, so each byte is scanned once.
long findHeadEnd(std::string_view data, size_t from);

}  // namespace sandgate::proxy
