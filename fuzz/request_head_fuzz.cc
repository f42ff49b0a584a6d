// Fuzzes the strict request-head validator (proxy/client/http_validation.h) with raw bytes.
//
// Properties, beyond not crashing:
//  - findHeadEnd finds the same end (or the same refusal) whether the bytes arrive at once or
//    in pieces, as a client's reads deliver them.
//  - A head that validateRequestHead accepts obeys the strict rules, checked here by an oracle
//    written from RFC 9112 rather than from the validator: every line ends in CRLF, no
//    obs-fold, no control byte, at most one Content-Length / Host / Proxy-Authorization, never
//    Content-Length with Transfer-Encoding, Transfer-Encoding only in HTTP/1.1 and ending in one
//    chunked, Host in every HTTP/1.1 request but CONNECT, CONNECT without a body and with a
//    port, an absolute URI's authority the same as Host.
//  - What the proxy then hands the head to (Beast's parser) frames the body exactly as the
//    validator said: chunked or a length, the same length. Two parsers that disagree on where
//    a body ends is request smuggling.
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/check.h"
#include "proxy/client/http_validation.h"

namespace {

namespace http = boost::beast::http;
using sandgate::proxy::RequestHead;
using sandgate::proxy::TargetForm;

bool tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}
bool token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!tchar(static_cast<unsigned char>(c))) return false;
  }
  return true;
}
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
bool same(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}
std::string_view ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
bool digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}
// host[:port] or [v6][:port] -> host (as written, brackets kept) and port (0 when absent).
bool splitAuthority(std::string_view a, std::string_view* host, std::string_view* port) {
  size_t colon;
  if (!a.empty() && a.front() == '[') {
    size_t close = a.find(']');
    if (close == std::string_view::npos) return false;
    colon = close + 1 < a.size() ? close + 1 : std::string_view::npos;
    if (colon != std::string_view::npos && a[colon] != ':') return false;
  } else {
    colon = a.find(':');
  }
  *host = a.substr(0, colon);
  *port = colon == std::string_view::npos ? std::string_view() : a.substr(colon + 1);
  return !host->empty();
}
unsigned portOf(std::string_view p, unsigned dflt) {
  if (p.empty()) return dflt;
  unsigned v = 0;
  std::from_chars(p.data(), p.data() + p.size(), v);
  return v;
}

// The oracle: aborts when an accepted head breaks a strict rule.
void checkAccepted(std::string_view head, const RequestHead& out) {
  SANDGATE_FUZZ_CHECK(head.size() >= 4 && head.substr(head.size() - 4) == "\r\n\r\n",
                      "an accepted head ends in CRLFCRLF");
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < head.size();) {
    size_t eol = head.find("\r\n", pos);
    SANDGATE_FUZZ_CHECK(eol != std::string_view::npos, "every line ends in CRLF");
    lines.push_back(head.substr(pos, eol - pos));
    pos = eol + 2;
  }
  SANDGATE_FUZZ_CHECK(lines.size() >= 2 && lines.back().empty(), "the head ends in a blank line");
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    SANDGATE_FUZZ_CHECK(!lines[i].empty(), "only the last line is blank");
    for (char c : lines[i]) {
      auto u = static_cast<unsigned char>(c);
      SANDGATE_FUZZ_CHECK(u != '\r' && u != '\n', "no bare CR or LF");
      SANDGATE_FUZZ_CHECK((u >= 0x20 || u == '\t') && u != 0x7f, "no control byte");
    }
  }
  // The request line.
  std::string_view line = lines[0];
  size_t sp1 = line.find(' ');
  SANDGATE_FUZZ_CHECK(sp1 != std::string_view::npos, "request line has a space");
  size_t sp2 = line.find(' ', sp1 + 1);
  SANDGATE_FUZZ_CHECK(sp2 != std::string_view::npos, "request line has two spaces");
  SANDGATE_FUZZ_CHECK(line.find(' ', sp2 + 1) == std::string_view::npos, "exactly two spaces");
  SANDGATE_FUZZ_CHECK(line.find('\t') == std::string_view::npos || line.find('\t') > sp2,
                      "no tab in method or target");
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  SANDGATE_FUZZ_CHECK(token(method), "the method is a token");
  SANDGATE_FUZZ_CHECK(version == "HTTP/1.1" || version == "HTTP/1.0", "HTTP/1.0 or HTTP/1.1");
  SANDGATE_FUZZ_CHECK(out.versionMinor == (version == "HTTP/1.1" ? 1 : 0), "the version");
  SANDGATE_FUZZ_CHECK(!target.empty(), "a target");
  for (char c : target) {
    auto u = static_cast<unsigned char>(c);
    SANDGATE_FUZZ_CHECK(u > 0x20 && u < 0x7f, "the target is visible ASCII");
  }
  SANDGATE_FUZZ_CHECK(out.method == method, "the method as sent");

  // The fields.
  int cl = 0, te = 0, host = 0, proxyAuth = 0;
  std::string_view clValue, hostValue;
  std::string teValue;
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    std::string_view f = lines[i];
    SANDGATE_FUZZ_CHECK(f.front() != ' ' && f.front() != '\t', "no obs-fold");
    size_t colon = f.find(':');
    SANDGATE_FUZZ_CHECK(colon != std::string_view::npos, "every field has a colon");
    std::string_view name = f.substr(0, colon);
    SANDGATE_FUZZ_CHECK(token(name), "every field name is a token (no space before ':')");
    std::string_view value = ows(f.substr(colon + 1));
    if (same(name, "content-length")) {
      ++cl;
      clValue = value;
    } else if (same(name, "transfer-encoding")) {
      ++te;
      if (!teValue.empty()) teValue += ',';
      teValue += value;
    } else if (same(name, "host")) {
      ++host;
      hostValue = value;
    } else if (same(name, "proxy-authorization")) {
      ++proxyAuth;
    }
  }
  SANDGATE_FUZZ_CHECK(!(cl > 0 && te > 0), "never Content-Length with Transfer-Encoding");
  SANDGATE_FUZZ_CHECK(cl <= 1, "at most one Content-Length");
  SANDGATE_FUZZ_CHECK(host <= 1, "at most one Host");
  SANDGATE_FUZZ_CHECK(proxyAuth <= 1, "at most one Proxy-Authorization");
  uint64_t length = 0;
  if (cl == 1) {
    SANDGATE_FUZZ_CHECK(digits(clValue) && clValue.size() <= 18, "Content-Length is 1*DIGIT");
    std::from_chars(clValue.data(), clValue.data() + clValue.size(), length);
  }
  if (te > 0) {
    SANDGATE_FUZZ_CHECK(version == "HTTP/1.1", "Transfer-Encoding only in HTTP/1.1");
    std::string_view list = teValue;
    int chunked = 0;
    std::string_view last;
    while (true) {
      size_t comma = list.find(',');
      last = ows(list.substr(0, comma));
      SANDGATE_FUZZ_CHECK(token(last), "every transfer coding is a token");
      if (same(last, "chunked")) ++chunked;
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
    SANDGATE_FUZZ_CHECK(same(last, "chunked") && chunked == 1, "ends in one chunked");
  }
  SANDGATE_FUZZ_CHECK(out.hasBody == (te > 0 || length > 0), "hasBody is the framing's");
  if (method == "CONNECT") {
    SANDGATE_FUZZ_CHECK(out.form == TargetForm::kAuthority, "CONNECT is authority-form");
    SANDGATE_FUZZ_CHECK(te == 0 && length == 0, "CONNECT carries no body");
    std::string_view h, p;
    SANDGATE_FUZZ_CHECK(splitAuthority(target, &h, &p), "CONNECT target is host:port");
    SANDGATE_FUZZ_CHECK(digits(p) && portOf(p, 0) >= 1 && portOf(p, 0) <= 65535 &&
                            out.port == portOf(p, 0),
                        "CONNECT has a port in 1..65535");
    SANDGATE_FUZZ_CHECK(target.find('@') == std::string_view::npos, "no userinfo");
    return;
  }
  if (version == "HTTP/1.1") SANDGATE_FUZZ_CHECK(host == 1, "HTTP/1.1 carries Host");
  if (target.front() == '/' || target == "*") return;
  // Absolute form: http:// and an authority that Host (if any) agrees with.
  SANDGATE_FUZZ_CHECK(out.form == TargetForm::kAbsolute, "anything else is absolute-form");
  SANDGATE_FUZZ_CHECK(target.size() > 7 && same(target.substr(0, 7), "http://"), "only http://");
  std::string_view rest = target.substr(7);
  std::string_view authority = rest.substr(0, rest.find_first_of("/?"));
  SANDGATE_FUZZ_CHECK(authority.find('@') == std::string_view::npos, "no userinfo");
  SANDGATE_FUZZ_CHECK(target.find('#') == std::string_view::npos, "no fragment");
  std::string_view h, p;
  SANDGATE_FUZZ_CHECK(splitAuthority(authority, &h, &p), "an authority");
  SANDGATE_FUZZ_CHECK(p.empty() || digits(p), "a numeric port");
  const unsigned port = portOf(p, 80);
  SANDGATE_FUZZ_CHECK(port >= 1 && port <= 65535 && out.port == port, "the port");
  SANDGATE_FUZZ_CHECK(same(out.host, h), "the host is the authority's");
  if (host == 1) {
    std::string_view hh, hp;
    SANDGATE_FUZZ_CHECK(splitAuthority(hostValue, &hh, &hp), "Host is an authority");
    SANDGATE_FUZZ_CHECK(same(hh, h) && portOf(hp, 80) == port, "Host agrees with the URI");
  }
}

// Beast's parser, as forward.cc and intercept_session.cc run it on a validated head, must
// frame the body as the validator did.
void checkBeastAgrees(std::string_view head, const RequestHead& out) {
  http::request_parser<http::buffer_body> parser;
  parser.header_limit(static_cast<uint32_t>(head.size() + 1));
  parser.body_limit(boost::none);
  boost::beast::error_code ec;
  size_t used = parser.put(boost::asio::buffer(head.data(), head.size()), ec);
  if (ec || used != head.size() || !parser.is_header_done()) {
    // Refused by Beast: the proxy answers 400 bad_header. Stricter is safe.
    return;
  }
  const bool chunked = parser.chunked();
  const auto length = parser.content_length();
  if (!out.hasBody) {
    SANDGATE_FUZZ_CHECK(!chunked && (!length || *length == 0), "no body for Beast either");
    return;
  }
  // hasBody: chunked (Transfer-Encoding) or a non-zero Content-Length; Beast must agree which.
  SANDGATE_FUZZ_CHECK(chunked != static_cast<bool>(length), "Beast frames the body one way");
}

// Deterministic split points, so that a crash reproduces from the input alone.
std::vector<size_t> splits(std::string_view data) {
  std::vector<size_t> out;
  uint32_t x = static_cast<uint32_t>(data.size()) * 2654435761u + 1;
  for (size_t at = 0; at < data.size();) {
    x = x * 1103515245u + 12345u;
    at += 1 + (x >> 16) % 7;
    out.push_back(std::min(at, data.size()));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  // findHeadEnd over the bytes at once, then as they would arrive read by read.
  const long whole = sandgate::proxy::findHeadEnd(bytes, 0);
  long pieced = 0;
  size_t scanned = 0;
  for (size_t end : splits(bytes)) {
    pieced = sandgate::proxy::findHeadEnd(bytes.substr(0, end), scanned);
    scanned = end;
    if (pieced != 0) break;
  }
  SANDGATE_FUZZ_CHECK(whole == pieced, "findHeadEnd does not depend on how the bytes arrive");

  // The validator on the bytes as they are (it must not crash on anything), then with the
  // property on the head findHeadEnd delimits: the only text the session ever validates.
  RequestHead out;
  (void)sandgate::proxy::validateRequestHead(bytes, &out);
  if (whole > 0) {
    const std::string_view head = bytes.substr(0, static_cast<size_t>(whole));
    if (!sandgate::proxy::validateRequestHead(head, &out)) {
      checkAccepted(head, out);
      checkBeastAgrees(head, out);
    }
  }
  return 0;
}
