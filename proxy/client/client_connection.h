// One client connection and what every request on it ends with: its refusal, its audit line
// and its metrics (outcome.cc). The rooms above (session, forward, tunnel, intercept) all
// work on a ClientConnection; this room calls none of them.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proxy/client/head_reader.h"
#include "proxy/client/http_validation.h"
#include "proxy/client/refusal.h"
#include "proxy/net/deadline_stream.h"
#include "proxy/net/endpoint.h"
#include "proxy/observe/audit.h"
#include "proxy/state/server_context.h"

namespace sandgate::broker {
class Secret;
}

namespace sandgate::proxy {

class TaskMetrics;
class TlsChannel;
class RequestCredentials;

// 16 hex digits from a per-thread generator seeded by OpenSSL's RNG: unique enough to join
// lines across replicas, cheap enough for every connection.
std::string newConnectionId();

struct ClientConnection {
  ClientConnection(Worker& w, ServerState& s, boost::asio::ip::tcp::socket sock)
      : worker(w), state(s), stream(std::move(sock)), id(newConnectionId()) {}

  Worker& worker;
  ServerState& state;
  DeadlineStream stream;
  // Bytes read from the client and not consumed yet: the rest of a request, a pipelined
  // request, or what followed a CONNECT head. Bounded by the head limit.
  boost::beast::flat_buffer buffer;
  std::shared_ptr<const Snapshot> snap;  // the snapshot this connection started with
  std::shared_ptr<const ListenerInfo> listener;
  std::string client;                        // peer "ip:port"
  const TaskEntry* task = nullptr;           // into *snap (or ownTask); null until identified
  std::shared_ptr<const TaskEntry> ownTask;  // an ad-hoc task made for this connection's token
  std::shared_ptr<TaskMetrics> metrics;
  TaskSlot connectionSlot;
  // A captured connection: the client never spoke to a proxy, so no "200 Connection
  // established" and no HTTP refusal page before the TLS it sends (refusals just close).
  bool transparent = false;
  bool silentRefusals = false;  // refusals close without a response (captured TLS streams)
  // on_unknown: ask: an operator approved this connection's CONNECT (client/ask.h): the
  // requests intercepted inside it (deny rules with methods or paths still judge each) are
  // covered by that answer, not asked about again.
  std::optional<ApprovalAudit> tunnelApproval;
  // A response was cut short after its head had gone out: the connection ends abortively (a
  // TCP reset, no TLS close_notify), so that a client reading to the end of the connection
  // (HTTP/1.0, a body without a length) cannot take the cut for the end.
  bool abortive = false;
  // Set when a task token (a JWT, task_token.h) identified the client: its SHA-256 (a request
  // carrying the same token is not verified again), its exp, and the hosts it narrows the
  // connection to (every request must name one of them as well as pass the policy).
  std::optional<TokenHash> tokenHash;
  int64_t tokenExp = 0;
  std::optional<std::vector<std::string>> tokenHosts;
  // The token itself, kept (in protected memory) to be checked again where no request carries
  // it: each request inside an intercepted tunnel, and an open tunnel's reviews (LiveTunnels).
  std::shared_ptr<const broker::Secret> token;
  // The broker's part in this connection's forwarded requests (forward.cc), made with the
  // first: its injector and compiled scrub set serve every request that follows.
  std::shared_ptr<RequestCredentials> forwardCredentials;

  // The audit lines' connection_id (16 random hex digits) and how many request ids it has
  // handed out (request_id is "<id>-<n>").
  const std::string id;
  uint64_t requestsSeen = 0;

  const config::EffectiveLimits& limits() const { return task ? task->limits : snap->defaults; }
};

// One request (or tunnel) in progress: its audit record and when it started.
struct RequestLog {
  AuditRecord record;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  // A CONNECT whose TLS sandgate terminates: its requests are counted one by one, so the
  // tunnel itself is counted as a tunnel, not as one more request (unless it was refused).
  bool intercepted = false;
  // A request under an `llm:` rule that sandgate reads as an LLM call (exchange/llm_gate.h):
  // a refusal of it counts in sandgate_llm_refusals_total as well.
  bool llmCall = false;
};

// The policy's decision for `req` on the connection's task, narrowed by its task token: a host
// outside the token's `hosts` is refused (denied_by_token) whatever the policy says.
policy::Decision decideRequest(const ClientConnection& c, const policy::Request& req);

// Gives `log` its request id (the next of the connection's) and the connection's id and run,
// unless it has them. Called where a request starts; finishRequest and refusals call it too.
void identifyRequest(ClientConnection& c, RequestLog& log);

// Writes the audit line and updates the metrics of a finished request or tunnel.
void finishRequest(ClientConnection& c, RequestLog& log);

// A request head the client cut short after `bytes` bytes, by closing (kClosed: verdict error,
// client_closed) or by falling silent until the idle timeout (kTimeout: deny, client_timeout):
// fills in rec, for finishRequest. Nothing of such a head goes upstream.
void noteCutHead(AuditRecord& rec, HeadStatus how, size_t bytes);

// Moves c to the snapshot current now, when a reload has made a new one: its task is looked up
// again by name (an ad-hoc task stays its own). Sets *changed when it moved. The refusal when
// the task is gone (revoked_by_reload); c keeps its old snapshot then.
std::optional<Refusal> refreshSnapshot(ClientConnection& c, bool* changed);

// Checks the task token that identified c again, under c's snapshot now (its expiry with
// tokens.leeway, its key, its revocation): the refusal (407, the token's reason),
// when the token no longer holds; nullopt when it does or c was not identified by a token.
std::optional<Refusal> recheckToken(const ClientConnection& c);

// Registers c's tunnel to target:port (spliced or intercepted) with the server's LiveTunnels
// for as long as it lives: a reload whose policy no longer allows it shuts it down.
class LiveTunnel {
 public:
  // `upstreamFd`: a spliced tunnel's upstream socket (it is shut down with the client's).
  LiveTunnel(ClientConnection& c, const policy::Target& target, uint16_t port, int upstreamFd = -1);
  ~LiveTunnel();
  LiveTunnel(const LiveTunnel&) = delete;
  LiveTunnel& operator=(const LiveTunnel&) = delete;
  // After the tunnel ended: when a reload ended it, says so in `rec` (revoked_by_reload).
  void noteEnd(AuditRecord& rec) const;

 private:
  ClientConnection& c_;
  uint64_t id_ = 0;
  std::atomic<bool> revoked_{false};
  std::string why_;
  std::string_view reason_;  // a token's reason; empty: revoked_by_reload
};

// The request's host as the policy names it (lower case, IDNA, an address parsed); nullopt when
// it is not a valid host, with the 400 invalid_host in `*refusal`.
std::optional<policy::Target> requestTarget(std::string_view host, const AuditRecord& rec,
                                            Refusal* refusal);

// Marks c abortive (see ClientConnection::abortive): its socket resets when closed.
void abortConnection(ClientConnection& c);

// Sends `r` (the connection is closed afterwards by the caller) and finishes the request
// as a refusal with r's status, reason and outcome. Pass a named Refusal, never a temporary: see
// session.cc for the compiler bug that makes temporaries in co_await expressions unsafe.
boost::asio::awaitable<void> refuse(ClientConnection& c, RequestLog& log, const Refusal& r);
// The same, inside the TLS that sandgate terminated on c (an intercepted connection).
boost::asio::awaitable<void> refuse(ClientConnection& c, TlsChannel& tls, RequestLog& log,
                                    const Refusal& r);

// Fills the audit record of a request that ends with `refusal` (its status, reason, outcome,
// request id) without sending anything: the refusal to send, with its request id. An HTTP/2
// stream sends it as its own response (proxy/h2/).
Refusal recordRefusal(ClientConnection& c, RequestLog& log, const Refusal& refusal);

// The 403 for what the policy denied (`d`): its reason, rule and detail, and `hint`.
Refusal policyRefusal(const policy::Decision& d, const std::string& task, const std::string& host,
                      std::string_view hint);

// The steps of a CONNECT that plain tunnels and interception share (outcome.cc).
// Takes one of the task's tunnel slots; an empty slot means the limit was hit and the 429 has
// been sent.
boost::asio::awaitable<TaskSlot> acquireTunnelSlot(ClientConnection& c, RequestLog& log);
// Sends "200 Connection established" and records the tunnel as allowed by `decision`; false
// (the audit line written) when the client is gone.
boost::asio::awaitable<bool> sendEstablished(ClientConnection& c, RequestLog& log,
                                             const policy::Decision& decision);

}  // namespace sandgate::proxy
