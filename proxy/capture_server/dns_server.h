// Serving the sandbox's DNS stub sockets on a worker's io_context. Internal to proxy/.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <memory>

#include "proxy/capture_server/capture.h"

namespace sandgate::proxy {

// One datagram in, at most one out, until the socket is closed (a release closes it on its
// io_context's thread; the frame keeps the socket alive until the loop has seen it) or the
// io_context stops.
boost::asio::awaitable<void> serveDnsUdp(std::shared_ptr<boost::asio::ip::udp::socket> socket,
                                         std::shared_ptr<CaptureContext> capture);

// Accepts DNS-over-TCP connections (RFC 1035 4.2.2 / RFC 7766): each carries length-prefixed
// queries, answered in order, within a per-read deadline and a per-connection query limit.
// Ends when the acceptor is closed (as serveDnsUdp); connections already accepted go on.
boost::asio::awaitable<void> serveDnsTcp(std::shared_ptr<boost::asio::ip::tcp::acceptor> acceptor,
                                         std::shared_ptr<CaptureContext> capture);

}  // namespace sandgate::proxy
