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
  bool ok() const { return socket.has_value(); }
};

// `allowed` is the name-level decision that admitted (target, port). A resolve override
// may change the port dialled; policy has already decided on the port asked for.
boost::asio::awaitable<DialResult> dialUpstream(const Snapshot& snap,
                                                const policy::Decision& allowed,
                                                const policy::Target& target, uint16_t port,
                                                const std::vector<OwnEndpoint>& own,
                                                config::Seconds connectTimeout, Metrics* metrics);

// dialUpstream() for c's task and snapshot. Records the address dialled in the audit record and,
// on failure, the rule that refused it; then `*refusal` is the answer to send (403: deny, else
// error) and nullopt is returned.
boost::asio::awaitable<std::optional<boost::asio::ip::tcp::socket>> dialForClient(
    ClientConnection& c, const policy::Decision& allowed, const policy::Target& target,
    uint16_t port, RequestLog& log, Refusal* refusal);

policy::IpAddress toIpAddress(const boost::asio::ip::address& a);
boost::asio::ip::address toAsioAddress(const policy::IpAddress& a);

}  // namespace sandgate::proxy
