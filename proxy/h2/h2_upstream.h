// The upstream leg of an HTTP/2 interception: dialled before the client's ALPN is answered,
// so that the client is offered h2 only when the upstream speaks it, or taken from the
// worker's pool of idle h2 upstream connections (one client connection at a time uses one; the
// pool's key is the HTTP/1.1 pool's: generation, task, host, port, credential). Internal to
// proxy/.
#pragma once

#include <nghttp2/nghttp2.h>

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
  ~H2Upstream();
  H2Upstream(const H2Upstream&) = delete;
  H2Upstream& operator=(const H2Upstream&) = delete;
  DeadlineStream stream;
  TlsChannel tls;
  std::string credential;  // the context it was verified with
  std::string address;
  std::string poolKey;  // the task, target, credential and snapshot it was dialled for
  // The client session towards the upstream, made by the first client connection served over
  // it (h2_proxy.cc) and kept with the socket: HPACK tables, settings, stream ids and the
  // inbound frame state belong to the bytes on this connection and go where it goes.
  nghttp2_session* session = nullptr;
};

// An idle connection of the worker's pool for exactly this task, target and credential under
// the current snapshot, if one is left; else dials the CONNECT's target as `allowed` (the
// CONNECT's decision) permits, verifies it with the
// TLS context of that decision's credential (verifyPeerAs), and offers `h2, http/1.1`. The
// connection when the upstream selected h2; null when it did not, or when any step failed (the
// client then gets HTTP/1.1, whose requests dial and report failures as they always do).
// `h1Only` is set when the handshake succeeded and the upstream selected another protocol.
boost::asio::awaitable<std::shared_ptr<H2Upstream>> dialH2Upstream(ClientConnection& c,
                                                                   const policy::Decision& allowed,
                                                                   const policy::Target& target,
                                                                   uint16_t port, RequestLog& log,
                                                                   bool* h1Only);

// Keeps `up` in the worker's pool for a later client connection of the same key (its session's
// user data cleared: no client connection's streams are reachable from it while it waits).
// The caller has checked that nothing is in flight on it (H2Proxy::reusableUpstream).
void poolH2Upstream(ClientConnection& c, std::shared_ptr<H2Upstream> up);

}  // namespace sandgate::proxy
