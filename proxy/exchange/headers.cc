// Deciding on and rewriting header fields (see headers.h).
#include "proxy/exchange/headers.h"

#include <boost/beast/core/string.hpp>
#include <string>
#include <vector>

#include "common/encoding.h"
#include "common/http_text.h"

namespace sandgate::proxy {

namespace beast = boost::beast;
namespace http = beast::http;

// Removes hop-by-hop fields and every field named in Connection. The framing fields
// (Content-Length, Transfer-Encoding) are never removed this way: the serializer frames the
// message from them, and a client must not be able to turn a body into a second request.
void stripHopByHop(boost::beast::http::fields& f) {
  std::vector<std::string> listed;
  auto [first, last] = f.equal_range(http::field::connection);
  for (auto it = first; it != last; ++it) {
    forEachListElement(it->value(), [&](std::string_view name) { listed.emplace_back(name); });
  }
  for (const auto& name : listed) {
    if (beast::iequals(name, "content-length") || beast::iequals(name, "transfer-encoding"))
      continue;
    f.erase(name);
  }
  for (auto name : {"Connection", "Keep-Alive", "TE", "Trailer", "Upgrade", "HTTP2-Settings"}) {
    f.erase(name);
  }
  // Proxy-* fields are for this hop (Proxy-Authorization is sandgate's own credential). A
  // client's X-Sandgate-Task or X-Sandgate-Credential could tell an upstream that trusts
  // sandgate something sandgate never said; an upstream's X-Sandgate-Reason could make a
  // relayed answer look like sandgate's refusal.
  const auto startsWith = [](std::string_view name, std::string_view prefix) {
    return name.size() >= prefix.size() && iequals(name.substr(0, prefix.size()), prefix);
  };
  for (auto it = f.begin(); it != f.end();) {
    const std::string_view name = it->name_string();
    if (startsWith(name, "proxy-") || startsWith(name, "x-sandgate-")) {
      it = f.erase(it);
    } else {
      ++it;
    }
  }
}

bool prepareRequestHead(boost::beast::http::request_header<>& req) {
  stripHopByHop(req);
  bool expectContinue = false;
  if (auto it = req.find(http::field::expect); it != req.end()) {
    expectContinue = iequals(it->value(), "100-continue");
    req.erase(http::field::expect);
  }
  req.version(11);
  return expectContinue;
}

bool upgradesToWebsocket(const boost::beast::http::fields& f) {
  auto it = f.find(http::field::upgrade);
  return it != f.end() && iequals(trimOws(it->value()), "websocket");
}

bool findOverrideParameter(std::string_view pairs, std::string& name) {
  while (!pairs.empty()) {
    const size_t end = pairs.find_first_of("&;");
    const std::string_view pair = pairs.substr(0, end);
    const std::string_view key = pair.substr(0, pair.find('='));
    std::string decoded;
    for (size_t i = 0; i < key.size(); ++i) {
      int hi = 0, lo = 0;
      if (key[i] == '%' && i + 2 < key.size() && (hi = hexValue(key[i + 1])) >= 0 &&
          (lo = hexValue(key[i + 2])) >= 0) {
        decoded += static_cast<char>(hi * 16 + lo);
        i += 2;
      } else {
        decoded += key[i] == '+' ? ' ' : key[i];
      }
    }
    // Blanks around the name and a "[]" suffix are dropped by PHP and Rack when they read it.
    decoded = std::string(trimOws(decoded));
    if (decoded.ends_with("[]")) decoded.resize(decoded.size() - 2);
    std::string folded = decoded;
    for (char& ch : folded) {
      if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
    }
    if (policy::isOverrideParameter(folded)) {
      name = "?" + decoded;
      return true;
    }
    if (end == std::string_view::npos) break;
    pairs.remove_prefix(end + 1);
  }
  return false;
}

policy::Decision decideHttpRequest(const ClientConnection& c, policy::Request req,
                                   const boost::beast::http::request_header<>& head) {
  for (const auto& field : head) {
    // A host whose rules restrict methods or paths refuses a request that asks the upstream
    // for another one.
    if (policy::isOverrideHeader(field.name_string())) {
      req.overrideHeader = field.name_string();
      break;
    }
  }
  std::string param;
  const std::string_view target = head.target();
  if (const size_t q = target.find('?'); !req.overrideHeader && q != std::string_view::npos) {
    const std::string_view query = target.substr(q + 1);
    if (findOverrideParameter(query.substr(0, query.find('#')), param)) req.overrideHeader = param;
  }
  return decideRequest(c, req);
}

}  // namespace sandgate::proxy
