// Override parameters in a form body, before the upstream (see form_gate.h).
#include "proxy/exchange/form_gate.h"

#include <fmt/format.h>

#include <boost/beast/core/string.hpp>

#include "common/http_text.h"
#include "proxy/exchange/body_peek.h"
#include "proxy/exchange/headers.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

bool isFormBody(const http::request_header<>& req) {
  auto it = req.find(http::field::content_type);
  if (it == req.end()) return req.method() == http::verb::post;
  const std::string_view value = it->value();
  return iequals(trimOws(value.substr(0, value.find(';'))), "application/x-www-form-urlencoded");
}

bool refusesOverrides(const ClientConnection& c, policy::Request req) {
  req.overrideHeader = "?_method";
  return decideRequest(c, req).reason == policy::reason::kOverrideHeader;
}

asio::awaitable<std::optional<std::string>> formBodyOverride(
    http::request_parser<http::buffer_body>& parser, beast::flat_buffer& in, size_t limit,
    const GitReadSome& readSome, const GitWrite& write, bool& sentContinue) {
  auto& req = parser.get();
  if (auto e = req.find(http::field::expect);
      e != req.end() && iequals(e->value(), "100-continue") && req.version() == 11) {
    // The client waits for this before it sends the body that is to be judged.
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    auto [ec, n] = co_await write(asio::buffer(kContinue.data(), kContinue.size()));
    if (ec) co_return std::nullopt;  // the client is gone: nothing will be relayed
    sentContinue = true;
  }
  BodyPeek peek(parser, limit);
  // Whatever was decoded is judged, also when the body ends early (the client stopped, or its
  // framing broke): the relay forwards those bytes before it fails.
  auto judged = [&]() -> std::optional<std::string> {
    std::string name;
    if (findOverrideParameter(peek.decoded(), name)) return name;
    return std::nullopt;
  };
  // Twice the decoded limit (and a little) of wire bytes: chunk framing around tiny chunks.
  const size_t rawLimit = 2 * limit + 4096;
  while (true) {
    const std::string_view wire(static_cast<const char*>(in.data().data()), in.data().size());
    if (!peek.feed(wire)) co_return judged();  // malformed framing: the relay refuses it
    if (peek.done()) break;
    if (peek.decoded().size() >= limit || wire.size() >= rawLimit) {
      co_return fmt::format("?(a form body over {} bytes, unchecked)", limit);
    }
    auto [ec, n] =
        co_await readSome(in.prepare(std::min<size_t>(16 * 1024, rawLimit - wire.size())));
    in.commit(n);
    if (ec) {
      peek.feed(std::string_view(static_cast<const char*>(in.data().data()), in.data().size()));
      co_return judged();
    }
  }
  co_return judged();
}

}  // namespace sandgate::proxy
