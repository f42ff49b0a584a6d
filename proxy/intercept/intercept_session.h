// The requests of one intercepted TLS connection: Host check, policy on method and path,
// credential injection, a verified TLS upstream, the response streamed back through the
// scrubber, and WebSocket upgrades. Internal to proxy/ (called by intercept.cc).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>

#include "policy/engine.h"
#include "proxy/net/tls_channel.h"

namespace sandgate::proxy {

struct ClientConnection;

// Serves requests on `tls` (handshake done, SNI checked) until the client is done, a request
// is refused, or a WebSocket on it ends. Each request gets its own audit line.
boost::asio::awaitable<void> serveIntercepted(ClientConnection& c, TlsChannel& tls,
                                              const policy::Target& target, uint16_t port);

}  // namespace sandgate::proxy
