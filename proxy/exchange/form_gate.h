// Method overrides in a form body (issue #38 item 4): Rails (Rack::MethodOverride), Laravel,
// Symfony and Express read `_method` from a POST's urlencoded form body as well as from its
// query, so on a host whose rules restrict methods or paths a body that carries one is judged
// like the query parameter before the upstream sees a byte of it. The body is read (bounded),
// judged on a decoded copy, and left in the client buffer for the relay (body_peek.h).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <optional>
#include <string>

#include "proxy/client/client_connection.h"
#include "proxy/exchange/git_gate.h"
#include "proxy/net/completion.h"

namespace sandgate::proxy {

// Whether frameworks read the request's body as a form: Content-Type
// application/x-www-form-urlencoded, or none on a POST (Rack parses that as a form too).
// multipart/form-data is not (README: not covered).
bool isFormBody(const boost::beast::http::request_header<>& req);

// Whether the policy refuses a method override on `req`'s host (a rule for it, allow or deny,
// restricts methods, paths or git): only there is a form body read before the upstream, so
// that bodies elsewhere stream as they always have.
bool refusesOverrides(const ClientConnection& c, policy::Request req);

// The override parameter in the form body of the request `parser` parsed ("?_method"), read up
// to `limit` decoded bytes; "?(a form body over N bytes, unchecked)" when it does not end within
// them (a host that restricts methods refuses it: the parameter may come after); nullopt when
// there is none, or when the client stops sending (the relay then fails on the same stream).
// `sentContinue` is set when the client asked for 100-continue and got it here.
boost::asio::awaitable<std::optional<std::string>> formBodyOverride(
    boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser,
    boost::beast::flat_buffer& in, size_t limit, const GitReadSome& readSome, const GitWrite& write,
    bool& sentContinue);

// formBodyOverride() on an exchange's client stream, each read and write under
// limits.body_timeout, bounded by limits.max_header_bytes (a form that needs more is no form a
// client of an API sends).
template <class Client>
boost::asio::awaitable<std::optional<std::string>> formBodyOverrideOn(
    Client& client, boost::beast::flat_buffer& in, ClientConnection& c,
    boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser,
    bool& sentContinue) {
  const auto timeout = toDuration(c.limits().bodyTimeout);
  const auto [readSome, write] = clientBodyIo(client, timeout);
  const size_t limit = static_cast<size_t>(std::max<uint64_t>(c.limits().maxHeaderBytes, 1024));
  co_return co_await formBodyOverride(parser, in, limit, readSome, write, sentContinue);
}

}  // namespace sandgate::proxy
