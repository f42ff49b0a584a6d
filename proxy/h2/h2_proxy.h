// HTTP/2 on both legs of an intercepted connection: every client stream is a request with
// everything an intercepted HTTP/1.1 request gets (h2_request.h), relayed as a stream of the
// one verified HTTP/2 upstream connection. Internal to proxy/ (called by intercept.cc).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>

#include "policy/engine.h"
#include "proxy/h2/h2_upstream.h"
#include "proxy/net/tls_channel.h"

namespace sandgate::proxy {

struct ClientConnection;
struct RequestLog;

// Serves the streams of `client` (handshake done, SNI checked, h2 selected) over `up` until
// either side ends, the connection idles, or an HTTP/2 error ends it. Each stream gets its own
// audit line; a connection error (GOAWAY) is recorded on `tunnel`, the CONNECT's line. `up`
// goes back to the worker's pool when the client leaves it with nothing in flight and the
// upstream has not said goodbye (see H2Proxy::reusableUpstream).
boost::asio::awaitable<void> serveH2(ClientConnection& c, TlsChannel& client,
                                     std::shared_ptr<H2Upstream> up, const policy::Target& target,
                                     uint16_t port, RequestLog& tunnel);

}  // namespace sandgate::proxy
