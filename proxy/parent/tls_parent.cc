// CONNECT through a TLS parent, bridged to a socketpair (see tls_parent.h).
#include "proxy/parent/tls_parent.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>
#include <memory>

#include "policy/ip.h"
#include "proxy/net/completion.h"
#include "proxy/net/upstream_tls.h"

namespace sandgate::proxy::parent {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using TlsStream = asio::ssl::stream<tcp::socket>;
using Local = asio::local::stream_protocol::socket;

namespace {

HandshakeResult broken(std::string detail) {
  return HandshakeResult{HandshakeOutcome::kBroken, 0, std::move(detail)};
}

// Copies one direction until it ends, then half-closes the other side's sending direction.
template <typename From, typename To, typename Shut>
asio::awaitable<void> pump(From& from, To& to, Shut shut) {
  std::array<char, 16384> buf;
  for (;;) {
    auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), kUse);
    if (n > 0) {
      auto [wec, w] = co_await asio::async_write(to, asio::buffer(buf.data(), n), kUse);
      if (wec) break;
    }
    if (ec) break;
  }
  shut();
}

// The bridge: the parent's TLS one side, the route's end of the socketpair the other; the
// bytes the parent sent after its CONNECT answer go first. Ends when both directions have.
asio::awaitable<void> bridge(std::shared_ptr<TlsStream> tls, std::shared_ptr<Local> local,
                             std::string early) {
  if (!early.empty()) {
    auto [ec, n] = co_await asio::async_write(*local, asio::buffer(early), kUse);
    if (ec) co_return;
  }
  boost::system::error_code ignored;
  co_await (
      pump(*tls, *local, [&] { local->shutdown(Local::shutdown_send, ignored); }) &&
      pump(*local, *tls, [&] { tls->next_layer().shutdown(tcp::socket::shutdown_send, ignored); }));
  tls->next_layer().close(ignored);
  local->close(ignored);
}

// The CONNECT inside the parent's TLS and its answer; what the parent sent after the answer's
// head is handed on in `early`.
struct TunnelAnswer {
  HandshakeResult hs;
  std::string early;
};

asio::awaitable<TunnelAnswer> askForTunnel(TlsStream& tls, asio::steady_timer& deadline,
                                           const TunnelTarget& target,
                                           std::string_view proxyAuthorization) {
  TunnelAnswer out;
  std::string request = connectRequest(target, proxyAuthorization);
  auto wr =
      co_await (asio::async_write(tls, asio::buffer(request), kUse) || deadline.async_wait(kUse));
  std::fill(request.begin(), request.end(), '\0');  // held the parent's credential
  if (wr.index() == 1 || std::get<0>(std::get<0>(wr))) {
    out.hs = broken("the parent did not take the CONNECT");
    co_return out;
  }
  // Over TLS nothing can be peeked: read up to the blank line and hand whatever came after it
  // to the bridge, ahead of everything else.
  std::string head;
  auto rr = co_await (
      asio::async_read_until(tls, asio::dynamic_buffer(head, kMaxParentHead), "\r\n\r\n", kUse) ||
      deadline.async_wait(kUse));
  if (rr.index() == 1) {
    out.hs = broken("the parent did not answer the CONNECT in time");
    co_return out;
  }
  auto [rec, n] = std::get<0>(rr);
  if (rec) {
    out.hs = broken(
        rec == asio::error::not_found
            ? fmt::format("the parent's answer to CONNECT is over {} bytes", kMaxParentHead)
            : fmt::format("the parent's answer to CONNECT could not be read: {}", rec.message()));
    co_return out;
  }
  out.early = head.substr(n);
  head.resize(n);
  auto status = parseStatusLine(head);
  if (!status || *status < 200) {
    out.hs = broken("the parent's answer to CONNECT is not a usable HTTP status line");
    co_return out;
  }
  if (*status == 407) {
    out.hs = HandshakeResult{HandshakeOutcome::kAuthFailed, 407,
                             proxyAuthorization.empty()
                                 ? "the parent asks for proxy authentication (407) and no "
                                   "credential is configured"
                                 : "the parent refused the configured credential (407)"};
    co_return out;
  }
  if (*status >= 300) {
    out.hs = HandshakeResult{HandshakeOutcome::kRefused, *status,
                             fmt::format("the parent answered CONNECT with {}", *status)};
    co_return out;
  }
  out.hs = HandshakeResult{HandshakeOutcome::kOk, *status, {}};
  co_return out;
}

}  // namespace

asio::awaitable<TlsTunnel> connectOverTls(tcp::socket sock, asio::ssl::context& ctx,
                                          const std::string& parentHost,
                                          asio::steady_timer& deadline, const TunnelTarget* target,
                                          std::string_view proxyAuthorization) {
  auto ex = co_await asio::this_coro::executor;
  TlsTunnel out;
  auto tls = std::make_shared<TlsStream>(std::move(sock), ctx);
  // The parent's certificate is checked for the URL's host, as an upstream's would be: its
  // credential must not go to whoever answers on that address.
  if (!verifyPeerAs(tls->native_handle(), parentHost, policy::parseIp(parentHost).has_value())) {
    out.hs = broken("TLS to the parent could not be set up");
    co_return out;
  }
  auto hr = co_await (tls->async_handshake(asio::ssl::stream_base::client, kUse) ||
                      deadline.async_wait(kUse));
  if (hr.index() == 1) {
    out.hs = broken("the parent's TLS handshake timed out");
    co_return out;
  }
  if (auto [ec] = std::get<0>(hr); ec) {
    out.hs = broken(fmt::format("TLS to the parent failed: {}", ec.message()));
    co_return out;
  }
  std::string early;
  int status = 200;
  if (target) {
    auto answer = co_await askForTunnel(*tls, deadline, *target, proxyAuthorization);
    if (answer.hs.outcome != HandshakeOutcome::kOk) {
      out.hs = std::move(answer.hs);
      co_return out;
    }
    early = std::move(answer.early);
    status = answer.hs.status;
  }
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    out.hs = broken("no socketpair for the TLS parent's bridge");
    co_return out;
  }
  auto local = std::make_shared<Local>(ex, asio::local::stream_protocol(), fds[0]);
  tcp::socket handed(ex);
  boost::system::error_code ec;
  // A stream socket of another family: the routes only read, write, splice and close it.
  handed.assign(tcp::v4(), fds[1], ec);
  if (ec) {
    ::close(fds[1]);
    out.hs = broken("the TLS parent's bridge could not be set up");
    co_return out;
  }
  asio::co_spawn(ex, bridge(tls, local, std::move(early)), asio::detached);
  out.socket.emplace(std::move(handed));
  out.hs = HandshakeResult{HandshakeOutcome::kOk, status, {}};
  co_return out;
}

}  // namespace sandgate::proxy::parent
