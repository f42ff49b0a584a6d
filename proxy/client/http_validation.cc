// Strict validation of a raw HTTP/1.x request head (see http_validation.h).
#include "proxy/client/http_validation.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/host_port.h"
#include "common/http_text.h"

namespace sandgate::proxy {
namespace {

bool isTchar(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool isToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return isTchar(c); });
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

HeadError err(std::string_view reason, std::string detail) { return {reason, std::move(detail)}; }

// Characters a host in an authority may contain. Anything else (userinfo '@', '\\', '#',
// '%', '/', non-ASCII, ...) is a sign of a parser-differential attack, not a real host.
bool isAuthorityHostChar(char c, bool bracketed) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  if (c == '-' || c == '.' || c == '_') return true;
  return bracketed && c == ':';
}

struct Authority {
  std::string_view host;
  uint16_t port = 0;
};

// Parses an authority ("host", "host:port", "[v6]:port"). `requirePort` for CONNECT targets.
std::optional<HeadError> parseAuthority(std::string_view a, bool requirePort, uint16_t defaultPort,
                                        Authority* out) {
  if (a.empty()) return err(reason::kBadAuthority, "empty authority");
  for (char c : a) {
    auto u = static_cast<unsigned char>(c);
    if (c == '@') return err(reason::kBadAuthority, "userinfo is not allowed in an authority");
    if (u >= 0x80 || c == '\\' || c == '#' || c == '%' || c == '/' || c == '?' || u < 0x21 ||
        u == 0x7f) {
      return err(reason::kBadAuthority, fmt::format("invalid character 0x{:02x} in authority", u));
    }
  }
  std::string_view host = a;
  std::string_view portText;
  bool bracketed = false;
  bool hasPort = false;
  if (a.front() == '[') {
    auto close = a.find(']');
    if (close == std::string_view::npos || close < 2) {
      return err(reason::kBadAuthority, "unterminated IPv6 literal");
    }
    host = a.substr(1, close - 1);
    bracketed = true;
    auto rest = a.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return err(reason::kBadAuthority, "garbage after IPv6 literal");
      portText = rest.substr(1);
      hasPort = true;
    }
  } else {
    auto colon = a.find(':');
    if (colon != std::string_view::npos) {
      host = a.substr(0, colon);
      portText = a.substr(colon + 1);
      hasPort = true;
    }
  }
  if (host.empty()) return err(reason::kBadAuthority, "empty host");
  for (char c : host) {
    if (!isAuthorityHostChar(c, bracketed)) {
      return err(reason::kBadAuthority, fmt::format("invalid character '{}' in host", c));
    }
  }
  // policy::normalizeHost wants an IPv6 literal in its brackets, as written.
  if (bracketed) host = a.substr(0, host.size() + 2);
  if (!hasPort) {
    if (requirePort) return err(reason::kBadTarget, "CONNECT target must be host:port");
    *out = {host, defaultPort};
    return std::nullopt;
  }
  auto port = parsePort(portText);
  if (!port) {
    return err(reason::kBadPort, fmt::format("port '{}' is not in 1..65535", portText));
  }
  *out = {host, *port};
  return std::nullopt;
}

bool isDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<HeadError> checkTransferEncoding(std::string_view te) {
  // Codings are comma-separated; the last must be chunked and chunked may appear only once,
  // otherwise the body's end is decided differently by different parsers.
  size_t chunkedCount = 0;
  std::string_view last;
  while (true) {
    auto comma = te.find(',');
    auto coding = trimOws(te.substr(0, comma));
    if (coding.empty()) return err(reason::kBadTransferEncoding, "empty transfer coding");
    if (!isToken(coding)) return err(reason::kBadTransferEncoding, "invalid transfer coding");
    if (iequals(coding, "chunked")) ++chunkedCount;
    last = coding;
    if (comma == std::string_view::npos) break;
    te.remove_prefix(comma + 1);
  }
  if (!iequals(last, "chunked") || chunkedCount != 1) {
    return err(reason::kBadTransferEncoding, "Transfer-Encoding must end in a single 'chunked'");
  }
  return std::nullopt;
}

}  // namespace

long findHeadEnd(std::string_view data, size_t from) {
  // Step back so that a CRLFCRLF split across reads is still found.
  size_t i = from > 3 ? from - 3 : 0;
  for (; i < data.size(); ++i) {
    char c = data[i];
    if (c == '\n') {
      if (i == 0 || data[i - 1] != '\r') return -1;
      if (i >= 3 && data[i - 2] == '\n' && data[i - 3] == '\r') return static_cast<long>(i + 1);
    } else if (c == '\r') {
      if (i + 1 < data.size() && data[i + 1] != '\n') return -1;
    }
  }
  return 0;
}

std::optional<HeadError> validateRequestHead(std::string_view head, RequestHead* out) {
  *out = RequestHead{};
  if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") {
    return err(reason::kBadRequestLine, "incomplete request head");
  }
  // Request line.
  auto eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  auto sp1 = line.find(' ');
  auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      line.find(' ', sp2 + 1) != std::string_view::npos) {
    return err(reason::kBadRequestLine, "request line must be 'METHOD target HTTP/1.x'");
  }
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (!isToken(method)) return err(reason::kBadRequestLine, "invalid method");
  if (version == "HTTP/1.1") {
    out->versionMinor = 1;
  } else if (version == "HTTP/1.0") {
    out->versionMinor = 0;
  } else {
    return err(reason::kBadRequestLine, "only HTTP/1.0 and HTTP/1.1 are supported");
  }
  if (target.empty()) return err(reason::kBadTarget, "empty request target");
  for (char c : target) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return err(reason::kBadTarget, fmt::format("invalid byte 0x{:02x} in request target", u));
    }
  }
  out->method = method;

  // Header fields.
  int contentLengthCount = 0, hostCount = 0, proxyAuthCount = 0, teCount = 0;
  std::string_view contentLength, hostHeader;
  std::string transferEncoding;
  size_t pos = eol + 2;
  while (pos < head.size()) {
    auto end = head.find("\r\n", pos);
    std::string_view field = head.substr(pos, end - pos);
    pos = end + 2;
    if (field.empty()) break;  // the blank line that ends the head
    if (field.front() == ' ' || field.front() == '\t') {
      return err(reason::kObsFold, "obsolete line folding is not allowed");
    }
    auto colon = field.find(':');
    if (colon == std::string_view::npos) return err(reason::kBadHeader, "field without ':'");
    std::string_view name = field.substr(0, colon);
    if (!isToken(name)) {
      return err(reason::kBadHeader, "invalid field name (whitespace or control characters)");
    }
    std::string_view value = trimOws(field.substr(colon + 1));
    for (char c : value) {
      auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) {
        return err(reason::kBadHeader,
                   fmt::format("control character 0x{:02x} in field '{}'", u, name));
      }
    }
    if (iequals(name, "content-length")) {
      ++contentLengthCount;
      contentLength = value;
    } else if (iequals(name, "transfer-encoding")) {
      ++teCount;
      if (!transferEncoding.empty()) transferEncoding += ',';
      transferEncoding += value;
    } else if (iequals(name, "host")) {
      ++hostCount;
      hostHeader = value;
    } else if (iequals(name, "proxy-authorization")) {
      ++proxyAuthCount;
      out->proxyAuthorization = value;
    }
  }

  // Framing.
  if (contentLengthCount > 0 && teCount > 0) {
    return err(reason::kAmbiguousFraming, "both Content-Length and Transfer-Encoding");
  }
  if (contentLengthCount > 1) {
    return err(reason::kBadContentLength, "more than one Content-Length");
  }
  if (contentLengthCount == 1) {
    if (!isDigits(contentLength) || contentLength.size() > 18) {
      return err(reason::kBadContentLength, "Content-Length is not a decimal number");
    }
    out->hasBody = contentLength.find_first_not_of('0') != std::string_view::npos;
  }
  if (teCount > 0) {
    if (out->versionMinor == 0) {
      return err(reason::kBadTransferEncoding, "Transfer-Encoding in an HTTP/1.0 request");
    }
    if (auto e = checkTransferEncoding(transferEncoding)) return e;
    out->hasBody = true;
  }
  if (hostCount > 1) return err(reason::kDuplicateHost, "more than one Host field");
  if (proxyAuthCount > 1) {
    return err(reason::kDuplicateProxyAuthorization, "more than one Proxy-Authorization field");
  }
  if (hostCount == 1) out->hostField = hostHeader;

  // Target.
  if (method == "CONNECT") {
    out->form = TargetForm::kAuthority;
    Authority a;
    if (auto e = parseAuthority(target, /*requirePort=*/true, 0, &a)) return e;
    out->host = a.host;
    out->port = a.port;
    if (out->hasBody || teCount > 0) {
      return err(reason::kConnectWithBody, "a CONNECT request cannot carry a body");
    }
    return std::nullopt;
  }
  // RFC 9112 section 3.2: every HTTP/1.1 request carries Host; one without it is a 400, in the
  // forward path and inside intercepted tunnels alike, once its target has been judged. (A
  // CONNECT names its target in the request line; many clients send it without Host.)
  auto hostRequired = [&]() -> std::optional<HeadError> {
    if (out->versionMinor == 1 && hostCount == 0) {
      return err(reason::kMissingHost,
                 "an HTTP/1.1 request must carry Host (RFC 9112 section 3.2)");
    }
    return std::nullopt;
  };
  if (target.front() == '/') {
    out->form = TargetForm::kOrigin;
    out->pathAndQuery = target;
    out->path = target.substr(0, target.find('?'));
    return hostRequired();
  }
  if (target == "*") {
    out->form = TargetForm::kAsterisk;
    return hostRequired();
  }
  auto schemeEnd = target.find("://");
  if (schemeEnd == std::string_view::npos || schemeEnd == 0) {
    return err(reason::kBadTarget, "request target is not an absolute http:// URI");
  }
  if (!iequals(target.substr(0, schemeEnd), "http")) {
    return err(reason::kBadScheme, fmt::format("scheme '{}' is not supported (only http)",
                                               target.substr(0, schemeEnd)));
  }
  out->form = TargetForm::kAbsolute;
  std::string_view rest = target.substr(schemeEnd + 3);
  auto authEnd = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, authEnd);
  Authority a;
  if (auto e = parseAuthority(authority, /*requirePort=*/false, 80, &a)) return e;
  out->host = a.host;
  out->port = a.port;
  std::string_view pq = authEnd == std::string_view::npos ? "" : rest.substr(authEnd);
  if (pq.find('#') != std::string_view::npos) {
    return err(reason::kBadTarget, "a request target cannot carry a fragment");
  }
  out->pathAndQuery = pq;
  out->path = pq.substr(0, pq.find('?'));
  if (out->path.empty()) out->path = "/";
  if (hostCount == 1) {
    Authority h;
    if (auto e = parseAuthority(hostHeader, false, 80, &h)) {
      return err(reason::kHostMismatch, "Host field is not a valid authority");
    }
    if (!iequals(h.host, a.host) || h.port != a.port) {
      return err(reason::kHostMismatch,
                 fmt::format("Host '{}' disagrees with the request URI", hostHeader));
    }
  }
  return hostRequired();
}

}  // namespace sandgate::proxy
