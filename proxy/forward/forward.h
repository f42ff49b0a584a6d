// Forwarding of absolute-form http:// requests (forward.cc): the proxy's plain-HTTP path.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstddef>

#include "proxy/client/client_connection.h"

namespace sandgate::proxy {

// Absolute-form http:// request whose head (headLen bytes at the start of c.buffer) passed
// validation. Returns true when the connection may carry another request.
boost::asio::awaitable<bool> handleForward(ClientConnection& c, const RequestHead& head,
                                           size_t headLen, RequestLog& log);

}  // namespace sandgate::proxy
