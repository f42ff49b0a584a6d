// Reaching an upstream: resolve (config overrides first), vet every address against the
// policy, dial a vetted one with a deadline. The address checked is the address dialled.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "policy/engine.h"
#include "proxy/client/client_connection.h"
#include "proxy/state/server_context.h"
#include "proxy/state/snapshot.h"

namespace sandgate::proxy {

class Metrics;

struct DialResult {
  std::optional<boost::asio::ip::tcp::socket> socket;  // set on success
  policy::Decision decision;  // for the address dialled; or the address refusal
  int status = 0;             // on failure: 403, 502 or 504
  std::string_view reason;    // on failure: a reason token
  std::string detail;         // on failure: one human sentence
  std::string upstream;       // "ip:port" dialled (or last tried); "name:port" a parent resolves
  std::string parent;         // the parent proxy it went through (or last tried); empty: direct
  // The socket is a connection to `parent` itself, for a plain http:// request in absolute
  // form (only when plainHttp was asked for; see dialUpstream).
  bool absoluteForm = false;
  bool ok() const { return socket.has_value(); }
};

// `allowed` is the name-level decision that admitted (target, port). A resolve override
// may change the port dialled; policy has already decided on the port asked for.
// `plainHttp`: the connection is for plain http:// requests, which an HTTP or HTTPS parent with
// `resolve: parent` gets in absolute form (its own connection, no CONNECT: see
// absoluteFormParent); with `resolve: local` a tunnel to the vetted address is asked for as for
// anything else, since only that makes the address sandgate vetted the one the parent dials.
boost::asio::awaitable<DialResult> dialUpstream(const Snapshot& snap,
                                                const policy::Decision& allowed,
                                                const policy::Target& target, uint16_t port,
                                                const std::vector<OwnEndpoint>& own,
                                                config::Seconds connectTimeout, Metrics* metrics,
                                                bool plainHttp = false);

// Whether plain http:// requests to `target` under `allowed` would go to parent `p` in
// absolute form.
bool absoluteFormParent(const Snapshot& snap, const config::UpstreamProxy& p,
                        const policy::Target& target);

// dialUpstream() for c's task and snapshot. Records the address dialled in the audit record and,
// on failure, the rule that refused it; then `*refusal` is the answer to send (403: deny, else
// error) and nullopt is returned.
// `plainHttp` as for dialUpstream; `*absoluteForm` then says whether the socket is to a parent
// that takes the request in absolute form (its name is the audit record's `parent`).
boost::asio::awaitable<std::optional<boost::asio::ip::tcp::socket>> dialForClient(
    ClientConnection& c, const policy::Decision& allowed, const policy::Target& target,
    uint16_t port, RequestLog& log, Refusal* refusal, bool plainHttp = false,
    bool* absoluteForm = nullptr);

policy::IpAddress toIpAddress(const boost::asio::ip::address& a);
boost::asio::ip::address toAsioAddress(const policy::IpAddress& a);

}  // namespace sandgate::proxy
