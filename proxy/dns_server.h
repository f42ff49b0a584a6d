// Serving the sandbox's DNS stub sockets on a worker's io_context. Internal to proxy/.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <memory>

#include "proxy/capture.h"

namespace sandgate::proxy {

// One datagram in, at most one out, until the socket is closed or the io_context stops.
boost::asio::awaitable<void> serveDnsUdp(boost::asio::ip::udp::socket socket,
                                         std::shared_ptr<CaptureContext> capture);

// Accepts DNS-over-TCP connections (RFC 1035 4.2.2 / RFC 7766): each carries length-prefixed
// queries, answered in order, within a per-read deadline and a per-connection query limit.
boost::asio::awaitable<void> serveDnsTcp(boost::asio::ip::tcp::acceptor& acceptor,
                                         std::shared_ptr<CaptureContext> capture);

}  // namespace sandgate::proxy
