// on_unknown: ask on the request path: a request the policy refuses only for want of a rule
// (Decision::askable) is held on the server's question registry (state/questions.h) until an
// operator answers or the task's ask.timeout passes. Forward, CONNECT and intercepted HTTP/1.1
// requests all come through here; an h2 stream is refused (approval_needs_http1), never let
// through unasked.
#pragma once

#include <boost/asio/awaitable.hpp>

#include "policy/engine.h"
#include "proxy/client/client_connection.h"

namespace sandgate::proxy {

// `d` unchanged unless it is askable on an ask task: then the request waits, and the result is
// policy::approve(d) (no rule's credential: the policy named nothing for it) or a refusal with
// approval_timeout, approval_denied or approval_queue_full. `log.record.approval` says which
// question, what answer and who gave it.
boost::asio::awaitable<policy::Decision> askOperator(ClientConnection& c,
                                                     const policy::Request& req, policy::Decision d,
                                                     RequestLog& log);

// For a request that cannot be held (an h2 stream): an askable refusal becomes
// approval_needs_http1 (approved instead inside a tunnel an operator approved); anything else
// is returned unchanged.
policy::Decision refuseUnasked(policy::Decision d, const ClientConnection& c,
                               const policy::Request& req);

}  // namespace sandgate::proxy
