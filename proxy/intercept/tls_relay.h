// The byte relay of an intercepted connection after the upstream switched protocols (a
// WebSocket's 101): decrypted bytes both ways between the client's TLS and the upstream's TLS,
// opaque, until either side ends or the idle timeout. Internal to proxy/.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <string>
#include <string_view>

#include "proxy/net/tls_channel.h"
#include "proxy/net/tunnel.h"

namespace sandgate::proxy {

// Rewrites the upstream's bytes on their way to the client (the WebSocket frame scrubber,
// websocket_relay.h). Fed every byte the upstream sends, in order, early bytes first.
class RelayFilter {
 public:
  virtual ~RelayFilter() = default;
  // Appends to `out` what to send the client for `in`. False: send `out`, then end the relay
  // (error() says why).
  virtual bool feed(std::string_view in, std::string& out) = 0;
  virtual std::string error() const = 0;
};

// `clientEarly` and `upstreamEarly` hold bytes already read past the HTTP heads (frames a side
// sent before or with the 101); they go first, in order, and are consumed. Either side's end
// (EOF, close_notify, error) ends both directions: WebSocket closes in-band (Close frames pass
// like any other bytes), so nothing is lost that either peer still expects. The TLS shutdown
// of each side is the caller's. `down` (may be null) rewrites what goes to the client.
boost::asio::awaitable<TunnelResult> relayTls(TlsChannel& client,
                                              boost::beast::flat_buffer& clientEarly,
                                              TlsChannel& upstream,
                                              boost::beast::flat_buffer& upstreamEarly,
                                              std::chrono::steady_clock::duration idleTimeout,
                                              RelayFilter* down = nullptr);

}  // namespace sandgate::proxy
