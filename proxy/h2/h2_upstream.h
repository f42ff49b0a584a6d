// The upstream leg of an HTTP/2 interception: dialled before the client's ALPN is answered,
// so that the client is offered h2 only when the upstream speaks it. Internal to proxy/.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>
#include <string>

#include "policy/engine.h"
#include "proxy/net/deadline_stream.h"
#include "proxy/net/tls_channel.h"

namespace sandgate::proxy {

struct ClientConnection;
struct RequestLog;

struct H2Upstream {
  H2Upstream(boost::asio::ip::tcp::socket s, SSL_CTX* ctx)
      : stream(std::move(s)), tls(stream, ctx, TlsChannel::Role::kClient) {}
  DeadlineStream stream;
  TlsChannel tls;
  std::string credential;  // the context it was verified with
  std::string address;
};

// Dials the CONNECT's target as `allowed` (the CONNECT's decision) permits, verifies it with the
// TLS context of that decision's credential (verifyPeerAs), and offers `h2, http/1.1`. The
// connection when the upstream selected h2; null when it did not, or when any step failed (the
// client then gets HTTP/1.1, whose requests dial and report failures as they always do).
// `h1Only` is set when the handshake succeeded and the upstream selected another protocol.
boost::asio::awaitable<std::unique_ptr<H2Upstream>> dialH2Upstream(
    ClientConnection& c, const policy::Decision& allowed, const policy::Target& target,
    uint16_t port, RequestLog& log, bool* h1Only);

}  // namespace sandgate::proxy
