// Forwarding of absolute-form http:// requests: policy on host, port, method and path, a
// pooled upstream connection, hop-by-hop headers removed, and bodies streamed both ways
// through fixed buffers (never a whole body in memory). Credentials apply as inside an
// intercepted tunnel (request_credentials.h), except that a secret goes out in clear only
// for a credential with allow_plaintext: a placeholder sent to a host its credential does not
// name is refused, and a rule's credential that may not travel in clear fails the request
// rather than letting it leave without. The exchange itself is the shared one (exchange.h).
#include "proxy/forward/forward.h"

#include <fmt/format.h>

#include "policy/host.h"
#include "proxy/client/client_connection.h"
#include "proxy/exchange/exchange.h"
#include "proxy/upstream/upstream.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

std::string originForm(std::string_view pathAndQuery) {
  if (pathAndQuery.empty()) return "/";
  if (pathAndQuery.front() == '?') return "/" + std::string(pathAndQuery);
  return std::string(pathAndQuery);
}

std::string hostHeader(std::string_view host, uint16_t port) {
  std::string h(host);
  if (port != 80) h += fmt::format(":{}", port);
  return h;
}

// The forward route of the shared exchange (exchange.h): the client's TCP stream, and a
// plain TCP upstream from the worker's pool or dialled for the request.
class ForwardRoute {
 public:
  static constexpr bool kIntercepted = false;
  // stripHopByHop removes Upgrade, so a ws:// upgrade goes as an ordinary request; a 101 to
  // it was not asked for and is refused.
  static constexpr bool kRelaysWebsocket = false;
  static constexpr std::string_view kKind = audit_kind::kForward;

  // The head's views point into the client buffer, which a gate that reads the body (git
  // push, form body) refills: the route keeps its own copies, so that the path judged again
  // and the target rewritten are the request's, not whatever bytes replaced them.
  ForwardRoute(ClientConnection& c, const RequestHead& head, const policy::Target& target)
      : c_(c),
        method_(head.method),
        path_(head.path),
        pathAndQuery_(head.pathAndQuery),
        host_(head.host),
        port_(head.port),
        target_(target) {
    if (!c.forwardCredentials) c.forwardCredentials = std::make_shared<RequestCredentials>(c);
  }

  DeadlineStream& client() { return c_.stream; }
  beast::flat_buffer& clientBuffer() { return c_.buffer; }
  DeadlineStream& upstream() { return *up_; }
  beast::flat_buffer& upstreamBuffer() { return upBuf_; }
  RequestCredentials& credentials() { return *c_.forwardCredentials; }
  const policy::Target& target() const { return target_; }

  asio::awaitable<void> refuse(RequestLog& log, const Refusal& r) {
    return proxy::refuse(c_, log, r);
  }
  std::optional<Refusal> checkRequest(Request&, RequestLog&) { return std::nullopt; }
  policy::Request policyRequest(const Request&) const {
    return policy::Request{target_, port_, std::string_view(method_), std::string_view(path_),
                           std::nullopt};
  }
  void rewriteHead(Request& req, bool) {
    req.target(originForm(pathAndQuery_));
    // An HTTP/1.0 request may come without Host (HTTP/1.1 ones without are refused).
    if (req.find(http::field::host) == req.end()) {
      req.set(http::field::host, hostHeader(host_, port_));
    }
  }

  asio::awaitable<std::optional<Refusal>> acquire(const policy::Decision& decision, RequestLog& log,
                                                  bool mayReuse, bool& reused) {
    auto& rec = log.record;
    up_.reset();
    upBuf_.clear();
    reused = false;
    if (mayReuse) {
      if (auto idle = c_.worker.pool.take(key())) {
        up_.emplace(std::move(idle->conn));
        rec.upstream = std::move(idle->upstream);
        address_ = rec.upstream;
        reused = true;
        co_return std::nullopt;
      }
    }
    Refusal dialRefusal;
    auto dialed = co_await dialForClient(c_, decision, target_, port_, log, &dialRefusal);
    if (!dialed) co_return dialRefusal;
    up_.emplace(std::move(*dialed));
    address_ = rec.upstream;
    co_return std::nullopt;
  }
  void dropUpstream() { up_.reset(); }
  void upstreamDone(bool clean) {
    if (clean && up_) c_.worker.pool.put(key(), up_->release_socket(), address_);
    up_.reset();
  }

 private:
  std::string key() const {
    return poolKey(c_.snap->generation, c_.task->name, target_.name, port_);
  }

  ClientConnection& c_;
  std::string method_, path_, pathAndQuery_, host_;
  uint16_t port_;
  const policy::Target& target_;
  std::optional<DeadlineStream> up_;
  beast::flat_buffer upBuf_;
  std::string address_;  // "ip:port" of up_
};

}  // namespace

asio::awaitable<bool> handleForward(ClientConnection& c, const RequestHead& head, size_t headLen,
                                    RequestLog& log) {
  auto& rec = log.record;
  rec.scheme = "http";
  rec.path = std::string(head.path);
  Refusal hostRefusal;
  const auto normalized = requestTarget(head.host, rec, &hostRefusal);
  if (!normalized) {
    co_await refuse(c, log, hostRefusal);
    co_return false;
  }
  const policy::Target& target = *normalized;
  rec.host = target.name;
  ForwardRoute route(c, head, target);
  co_return co_await runExchange(route, c, headLen, log);
}

}  // namespace sandgate::proxy
