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

// Finds the first parameter of `pairs` (a query string or a urlencoded form body: pairs split
// at '&' and ';', both separators to some frameworks) whose name, percent-decoded, frameworks
// read as a method or URL override (policy::isOverrideParameter: "_method", "%5Fmethod",
// "_method[]", "X-HTTP-Method-Override"); `name` gets "?" and its decoded name.
bool findOverrideParameter(std::string_view pairs, std::string& name);

// The policy's decision for an HTTP request (`req`: target, port, method, path) whose head is
// `head`: a header field or query parameter asking the upstream for another method or URL
// (X-HTTP-Method-Override, ?_method= and the like, policy::isOverrideHeader) is recorded so
// that a host whose rules restrict methods or paths refuses it. Narrowed by the connection's
// task token (decideRequest).
policy::Decision decideHttpRequest(const ClientConnection& c, policy::Request req,
                                   const boost::beast::http::request_header<>& head);

}  // namespace sandgate::proxy
