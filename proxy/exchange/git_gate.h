// The `git:` block of a rule on the data path: after the policy admitted a request and before
// any upstream is dialled, a Git smart-HTTP request is checked against the block
// (policy/git_rules.h). A fetch or advertisement for a repository outside it gets an ordinary
// refusal; a push (POST …/git-receive-pack) has the start of its body read, bounded, until
// the end of its command list, and is either let through (every byte read stays in the
// client buffer, unconsumed, so the relay forwards the whole body as it would have) or
// answered in Git's own report-status, with nothing sent upstream.
//
// The body is not consumed while it is judged: the bytes stay in `in` and a private parser
// decodes a copy of them (Content-Length or chunked, Beast's own decoder, so the bytes judged
// are the bytes the relay forwards).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "policy/engine.h"
#include "proxy/client/client_connection.h"
#include "proxy/client/refusal.h"
#include "proxy/exchange/relay.h"
#include "proxy/net/completion.h"

namespace sandgate::proxy {

using GitReadSome =
    std::function<boost::asio::awaitable<std::tuple<boost::system::error_code, size_t>>(
        boost::asio::mutable_buffer)>;
using GitWrite =
    std::function<boost::asio::awaitable<std::tuple<boost::system::error_code, size_t>>(
        boost::asio::const_buffer)>;

// The reads and writes a body gate (this one, form_gate.h's) makes on an exchange's client
// stream, a DeadlineStream or a TlsChannel: each under `timeout`, so a client that stops
// sending mid-body cannot hold the exchange.
struct ClientBodyIo {
  GitReadSome readSome;
  GitWrite write;
};
template <class Client, class Duration>
ClientBodyIo clientBodyIo(Client& client, Duration timeout) {
  ClientBodyIo io;
  io.readSome = [&client, timeout](boost::asio::mutable_buffer into)
      -> boost::asio::awaitable<std::tuple<boost::system::error_code, size_t>> {
    boost::beast::get_lowest_layer(client).expires_after(timeout);
    if constexpr (requires { client.readSome(into); }) {
      co_return co_await client.readSome(into);
    } else {
      co_return co_await client.async_read_some(into, kUse);
    }
  };
  io.write = [&client, timeout](boost::asio::const_buffer out)
      -> boost::asio::awaitable<std::tuple<boost::system::error_code, size_t>> {
    boost::beast::get_lowest_layer(client).expires_after(timeout);
    co_return co_await writeBytes(client, out);
  };
  return io;
}

struct GitGateResult {
  enum class Action {
    kForward,  // not a Git request, or one the block admits: carry on as usual
    kRefuse,   // send `refusal` (an ordinary one) and close
    kAnswered  // the Git-native answer was sent (or the client left): finish and close
  };
  Action action = Action::kForward;
  Refusal refusal;
  bool sentContinue = false;  // "100 Continue" was sent (the client asked, to send its push)
};

// The most a refused push's body (or an unreadable one's) is read and discarded before the
// answer is sent, so that the client, still sending, reads the answer rather than a reset;
// past it the connection is closed after the answer.
inline constexpr uint64_t kGitDrainLimit = 64ull << 20;

// Checks the request whose head `parser` has parsed (its body, if any, starts at `in`) under
// `decision.git`; `path` (no query) and `query` are its target's. `limit` bounds the command list
// (the task's limits.max_header_bytes: the command list is the head of a push). Audit fields of a
// Git request are filled into `log`.
boost::asio::awaitable<GitGateResult> gateGitRequest(
    ClientConnection& c, const policy::Decision& decision, std::string_view path,
    std::string_view query,
    boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser,
    boost::beast::flat_buffer& in, RequestLog& log, const GitReadSome& readSome,
    const GitWrite& write);

// gateGitRequest() on an exchange's client stream (a DeadlineStream or a TlsChannel), each read
// and write under limits.body_timeout. The request's target is the policy's path and the query
// after the first '?' of the request line (origin- or absolute-form alike).
template <class Client>
boost::asio::awaitable<GitGateResult> gateGitOn(
    Client& client, boost::beast::flat_buffer& in, ClientConnection& c,
    const policy::Decision& decision, std::string_view path,
    boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser, RequestLog& log) {
  const auto timeout = toDuration(c.limits().bodyTimeout);
  const auto [readSome, write] = clientBodyIo(client, timeout);
  const std::string_view target = parser.get().target();
  const size_t q = target.find('?');
  const std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  co_return co_await gateGitRequest(c, decision, path, query, parser, in, log, readSome, write);
}

}  // namespace sandgate::proxy
