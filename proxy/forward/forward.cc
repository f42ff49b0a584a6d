// Forwarding of absolute-form http:// requests: policy on host, port, method and path, a
// pooled upstream connection, hop-by-hop headers removed, and bodies streamed both ways
// through fixed buffers (never a whole body in memory). Credentials apply as inside an
// intercepted tunnel (request_credentials.h), except that a secret goes out in clear only
// for a credential with allow_plaintext: a placeholder sent to a host its credential does not
// name is refused, and a rule's credential that may not travel in clear fails the request
// rather than letting it leave without. The exchange itself is the shared one (exchange.h).
#include "proxy/forward/forward.h"

#include <fmt/format.h>

#include "broker/secret.h"
#include "policy/host.h"
#include "proxy/client/client_connection.h"
#include "proxy/client/reasons.h"
#include "proxy/exchange/exchange.h"
#include "proxy/parent/parent_dial.h"
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
    // The target is set in prepareSend(), once it is known whether a parent takes it.
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
    viaParent_ = nullptr;
    if (mayReuse) {
      // A connection to a parent that takes requests in absolute form is pooled under its name.
      const config::UpstreamProxy* planned = nullptr;
      auto chain = parent::chainFor(c_.snap->config, decision, target_);
      if (!chain.empty() && absoluteFormParent(*c_.snap, *chain.front(), target_)) {
        planned = chain.front();
      }
      if (auto idle = c_.worker.pool.take(key(planned))) {
        up_.emplace(std::move(idle->conn));
        rec.upstream = std::move(idle->upstream);
        if (planned) rec.parent = planned->name;
        address_ = rec.upstream;
        viaParent_ = planned;
        reused = true;
        co_return std::nullopt;
      }
    }
    Refusal dialRefusal;
    bool absoluteForm = false;
    auto dialed = co_await dialForClient(c_, decision, target_, port_, log, &dialRefusal,
                                         /*plainHttp=*/true, &absoluteForm);
    if (!dialed) co_return dialRefusal;
    up_.emplace(std::move(*dialed));
    address_ = rec.upstream;
    if (absoluteForm) viaParent_ = c_.snap->config.upstream.find(rec.parent);
    co_return std::nullopt;
  }

  // A parent that takes the request itself gets it in absolute form with its own
  // Proxy-Authorization (the client's never leaves sandgate: stripped with the hop-by-hop
  // fields); anyone else gets origin form. Set again for each attempt, which may go elsewhere.
  void prepareSend(Request& req) {
    req.erase(http::field::proxy_authorization);
    if (!viaParent_) {
      req.target(originForm(pathAndQuery_));
      return;
    }
    req.target(fmt::format("http://{}{}", hostHeader(target_.name, port_),
                           originForm(pathAndQuery_)));
    if (auto auth = parent::proxyAuthorization(*c_.snap, *viaParent_); auth && !auth->empty()) {
      req.set(http::field::proxy_authorization, *auth);  // the head is cleansed when it ends
      broker::wipe(*auth);
    }
  }

  // A parent's own answer is its, not the upstream's: a 407, or an error it marks as its own
  // (RFC 9209 Proxy-Status with an error, squid's X-Squid-Error), becomes sandgate's 502 naming
  // the parent, and its body is never relayed.
  std::optional<Refusal> checkResponse(const ResponseParser& rp) {
    if (!viaParent_) return std::nullopt;
    const auto& res = rp.get();
    const int status = res.result_int();
    const std::string name = fmt::format("parent `{}`", viaParent_->name);
    auto refusal = [&](std::string_view reason, std::string detail) {
      return Refusal{.status = 502,
                     .reason = reason,
                     .task = c_.task ? c_.task->name : "",
                     .host = target_.name,
                     .detail = std::move(detail),
                     .outcome = Outcome::kError};
    };
    if (status == 407) {
      return refusal(reason::kParentAuthFailed,
                     viaParent_->credential
                         ? fmt::format("{} refused the configured credential (407)", name)
                         : fmt::format("{} asks for proxy authentication (407) and no credential "
                                       "is configured",
                                       name));
    }
    const bool proxyStatusError = [&] {
      auto [from, to] = res.equal_range("Proxy-Status");
      for (auto f = from; f != to; ++f) {
        if (f->value().find("error=") != std::string_view::npos) return true;
      }
      return false;
    }();
    if (proxyStatusError || res.find("X-Squid-Error") != res.end()) {
      return refusal(reason::kParentRefused,
                     fmt::format("{} answered the request with {} itself", name, status));
    }
    return std::nullopt;
  }

  void dropUpstream() { up_.reset(); }
  void upstreamDone(bool clean) {
    if (clean && up_) c_.worker.pool.put(key(viaParent_), up_->release_socket(), address_);
    up_.reset();
  }

 private:
  std::string key(const config::UpstreamProxy* viaParent) const {
    if (!viaParent) return poolKey(c_.snap->generation, c_.task->name, target_.name, port_);
    return poolKey(c_.snap->generation, c_.task->name,
                   fmt::format("{} via parent {}", target_.name, viaParent->name), port_);
  }

  ClientConnection& c_;
  std::string method_, path_, pathAndQuery_, host_;
  uint16_t port_;
  const policy::Target& target_;
  std::optional<DeadlineStream> up_;
  beast::flat_buffer upBuf_;
  std::string address_;  // "ip:port" of up_
  // The parent up_ is a connection to, when it takes requests in absolute form.
  const config::UpstreamProxy* viaParent_ = nullptr;
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
