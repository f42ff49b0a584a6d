// What every exchange (forwarded and intercepted requests) does with a request's header
// fields: decide on them, and rewrite them.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

#include "policy/engine.h"
#include "proxy/client/client_connection.h"

namespace sandgate::proxy {

// Removes hop-by-hop fields, the Proxy-* fields, every field named in Connection (never the
// framing fields) and every X-Sandgate-* field: that namespace is sandgate's own (its
// refusals' X-Sandgate-Reason), so neither a client nor an upstream may write in it.
void stripHopByHop(boost::beast::http::fields& f);

// The rewrite every relayed request gets: stripHopByHop, Expect removed (sandgate answers
// 100-continue itself), HTTP/1.1. Returns whether the client asked for 100-continue.
bool prepareRequestHead(boost::beast::http::request_header<>& req);

// `Upgrade: websocket` (one token, any case)?
bool upgradesToWebsocket(const boost::beast::http::fields& f);

// The policy's decision for an HTTP request (`req`: target, port, method, path) whose header
// fields are `f`: a field asking the upstream for another method or URL (X-HTTP-Method-Override
// and the like) is recorded so that rules with methods or paths refuse it. Narrowed by the
// connection's task token (decideRequest).
policy::Decision decideHttpRequest(const ClientConnection& c, policy::Request req,
                                   const boost::beast::http::fields& f);

}  // namespace sandgate::proxy
