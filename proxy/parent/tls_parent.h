// A CONNECT tunnel through a parent reached over TLS (https:// in upstream_proxies). The
// routes above take a plain TCP socket, so the TLS session with the parent is bridged to one
// end of a socketpair and the other end is handed on: what the route writes there goes through
// the parent's TLS, and the parent's certificate is verified like an upstream's (system roots
// plus tls.upstream_ca, the name or address of the URL). Without a target no CONNECT is sent:
// the bridge carries requests to the parent itself.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "proxy/parent/handshake.h"

namespace sandgate::proxy::parent {

struct TlsTunnel {
  std::optional<boost::asio::ip::tcp::socket> socket;  // the bridged end, when hs is kOk
  HandshakeResult hs;
};

boost::asio::awaitable<TlsTunnel> connectOverTls(boost::asio::ip::tcp::socket sock,
                                                 boost::asio::ssl::context& ctx,
                                                 const std::string& parentHost,
                                                 boost::asio::steady_timer& deadline,
                                                 const TunnelTarget* target,
                                                 std::string_view proxyAuthorization);

}  // namespace sandgate::proxy::parent
