// Connections captured on a synthetic address (transparent mode): the name comes from the
// local address the client reached, then the CONNECT or forward path runs as if the client
// had asked the proxy for that name. Internal to proxy/ (session.cc).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "proxy/client/client_connection.h"
#include "proxy/client/http_validation.h"

namespace sandgate::proxy {

// Port whose captured connections carry plain HTTP (forward path); every other captured
// port is a byte stream treated like CONNECT name:port (SNI checked on 443).
inline constexpr uint16_t kCapturedHttpPort = 80;

struct CapturedTarget {
  std::string name;   // the name the synthetic address was given for
  uint16_t port = 0;  // the port the client connected to
  std::string local;  // "198.18.0.7:443", the listener field of the audit line
  bool http = false;
};

// The name behind c's local address. nullopt: not a synthetic address handed out; the
// refusal is audited (mode transparent) and the caller closes the connection.
std::optional<CapturedTarget> capturedTarget(ClientConnection& c);

// A captured byte-stream connection: CONNECT name:port without the CONNECT. Ends it.
boost::asio::awaitable<void> handleCapturedStream(ClientConnection& c, const CapturedTarget& t,
                                                  RequestLog& log);

// A captured plain HTTP request head: must be origin-form with a Host equal to the name
// (and port, if given). On success rewrites `head` into the absolute form the forward path
// takes (host and port from `t`, views into `t`). Returns the refusal otherwise.
std::optional<Refusal> capturedHttpHead(const CapturedTarget& t, RequestHead* head);

}  // namespace sandgate::proxy
