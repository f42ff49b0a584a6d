// CONNECT (connect.cc): the policy decision for the tunnel, then a spliced tunnel checked by
// its ClientHello, or interception.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstddef>

#include "proxy/client/client_connection.h"

namespace sandgate::proxy {

// CONNECT whose head (headLen bytes) passed validation. Always ends the connection.
boost::asio::awaitable<void> handleConnect(ClientConnection& c, const RequestHead& head,
                                           size_t headLen, RequestLog& log);

}  // namespace sandgate::proxy
