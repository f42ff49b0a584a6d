// The steady state of a CONNECT tunnel: bytes both ways until both sides have closed, an
// error, or the idle timeout. splice(2) through a pipe (the bytes never enter user space);
// a buffered copy where splice is unavailable.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <string>

namespace sandgate::proxy {

struct TunnelResult {
  uint64_t bytesUp = 0;    // client -> upstream
  uint64_t bytesDown = 0;  // upstream -> client
  bool idleTimeout = false;
  bool upstreamReset = false;  // the upstream side failed (reset) rather than closed
  std::string error;           // first error that ended a direction, if any
  bool spliced = false;        // false: the buffered fallback was used
};

// Relays until done. A side that sends EOF gets its half-close propagated (shutdown of the
// other side's write direction); the tunnel ends when both directions have ended. An error on
// either side (a reset, a failed write) ends both, and leaves both sockets set to reset when
// closed, so that each peer sees the failure: the caller must close them explicitly (close(),
// not the destructor, which Asio makes turn SO_LINGER off so as never to block).
boost::asio::awaitable<TunnelResult> runTunnel(boost::asio::ip::tcp::socket& client,
                                               boost::asio::ip::tcp::socket& upstream,
                                               std::chrono::steady_clock::duration idleTimeout);

}  // namespace sandgate::proxy
