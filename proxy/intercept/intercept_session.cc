// The requests of one intercepted TLS connection (see intercept_session.h).
//
// WebSocket: an upgrade request passes the same Host check, policy (method and path) and
// credential injection as any request. When the upstream answers 101 with `Upgrade:
// websocket`, the 101 goes to the client and the connection becomes a frame relay (see
// websocket_relay.h) under the idle timeout of a tunnel; any other answer is an ordinary
// response. The upstream's frames are parsed and their payloads scrubbed like a body (text,
// binary and control frames, a secret split across fragments too); the client's masked frames
// go upstream as bytes. Sec-WebSocket-Extensions is removed from the upgrade request and a 101
// that selects an extension anyway is refused (websocket_extension_selected), so no frame is
// compressed (permessage-deflate) where a secret could not be found. An
// Upgrade to any other protocol is refused (upgrade_not_supported): h2c is not used inside TLS
// (ALPN negotiates HTTP/2 there, and sandgate speaks only HTTP/1.1), and an opaque relay for
// an unknown protocol would be a tunnel the policy never saw.
#include "proxy/intercept/intercept_session.h"

#include <fmt/format.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <optional>
#include <vector>

#include "broker/scrubber.h"
#include "common/http_text.h"
#include "policy/host.h"
#include "proxy/client/client_connection.h"
#include "proxy/client/head_reader.h"
#include "proxy/exchange/exchange.h"
#include "proxy/intercept/tls_relay.h"
#include "proxy/intercept/websocket_relay.h"
#include "proxy/net/upstream_tls.h"
#include "proxy/upstream/upstream.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

struct UpstreamTlsConnection {
  UpstreamTlsConnection(tcp::socket s, SSL_CTX* ctx)
      : stream(std::move(s)), tls(stream, ctx, TlsChannel::Role::kClient) {}
  DeadlineStream stream;
  TlsChannel tls;
  beast::flat_buffer buf;  // read but not yet parsed: empty between responses
  std::string credential;  // the context it was verified with
  std::string address;
};

// Reusable: nothing buffered here or inside OpenSSL, nothing unread on the socket (a
// close_notify or any stray byte from the upstream ends it).
bool PooledConnection<std::shared_ptr<UpstreamTlsConnection>>::quiet(
    std::shared_ptr<UpstreamTlsConnection>& c) {
  if (!c || c->buf.size() != 0 || !c->tls.quiet()) return false;
  auto& socket = c->stream.socket();
  return socket.is_open() && socketIsQuiet(socket.native_handle());
}

namespace {

// The request line's target is not origin-form ("/path"): an absolute-form target could name
// another host than the tunnel's, and `*` or an authority name no path the policy could judge.
// A line with no target after its method is left to validateRequestHead.
bool notOriginForm(std::string_view head) {
  const std::string_view line = head.substr(0, head.find("\r\n"));
  const size_t sp = line.find(' ');
  return sp != std::string_view::npos && sp + 1 < line.size() && line[sp + 1] != '/' &&
         line[sp + 1] != ' ';
}

// The intercept route of the shared exchange (exchange.h): the TLS sandgate terminated for the
// client, and a verified TLS upstream held across the connection's requests.
class InterceptSession {
 public:
  static constexpr bool kIntercepted = true;
  static constexpr bool kRelaysWebsocket = true;
  static constexpr std::string_view kKind = audit_kind::kIntercept;

  InterceptSession(ClientConnection& c, TlsChannel& tls, const policy::Target& target,
                   uint16_t port)
      : c_(c), tls_(tls), target_(target), port_(port) {
    creds_.emplace(c);
  }

  // Serves requests until the connection ends.
  asio::awaitable<void> run();

  // The route, for runExchange.
  TlsChannel& client() { return tls_; }
  beast::flat_buffer& clientBuffer() { return in_; }
  TlsChannel& upstream() { return up_->tls; }
  beast::flat_buffer& upstreamBuffer() { return up_->buf; }
  RequestCredentials& credentials() { return *creds_; }
  const policy::Target& target() const { return target_; }
  asio::awaitable<void> refuse(RequestLog& log, const Refusal& r) {
    return proxy::refuse(c_, tls_, log, r);
  }
  // The Host field must name the tunnel's target.
  std::optional<Refusal> checkRequest(Request& req, RequestLog& log);
  policy::Request policyRequest(const Request&) const {
    return policy::Request{target_, port_, std::string_view(method_), std::string_view(path_),
                           std::nullopt};
  }
  void rewriteHead(Request& req, bool websocket);
  // Makes up_ a verified connection for the decision's credential: the one this session holds,
  // else an idle one of the worker's pool, else a new one (always new when !mayReuse).
  // `reused` says whether it had carried requests before (the upstream may have closed it).
  asio::awaitable<std::optional<Refusal>> acquire(const policy::Decision& d, RequestLog& log,
                                                  bool mayReuse, bool& reused);
  void prepareSend(Request&) {}
  std::optional<Refusal> checkResponse(const ResponseParser&) { return std::nullopt; }
  void dropUpstream() { up_.reset(); }
  void upstreamDone(bool clean) {
    upClean_ = clean;
    if (!clean) up_.reset();
  }
  asio::awaitable<void> switchProtocols(RequestLog& log, ResponseParser& rp);

 private:
  asio::awaitable<bool> one();
  // Reads a request head into in_ (see readRequestHead).
  asio::awaitable<HeadRead> readHead();
  std::string poolKeyFor(const std::string& credential) const;
  // Hands up_ to the worker's pool (when it may be reused) and lets go of it.
  void releaseUpstream();

  ClientConnection& c_;
  TlsChannel& tls_;
  const policy::Target& target_;
  uint16_t port_;
  beast::flat_buffer in_;  // decrypted client bytes not consumed yet
  std::string method_;     // the current request's
  std::string path_;       // the current request's path, without the query
  std::shared_ptr<UpstreamTlsConnection> up_;
  // up_ ended its last exchange cleanly: the whole request sent, the whole response read,
  // nothing left over. Only then may it carry another request, here or from the pool.
  bool upClean_ = false;
  std::optional<RequestCredentials> creds_;  // made again when a reload changes the snapshot
};

std::string InterceptSession::poolKeyFor(const std::string& credential) const {
  return poolKey(c_.snap->generation, c_.task->name, target_.name, port_, credential);
}

void InterceptSession::releaseUpstream() {
  if (!up_) return;
  if (upClean_ && !c_.state.draining.load(std::memory_order_relaxed)) {
    std::string key = poolKeyFor(up_->credential);
    std::string address = up_->address;
    c_.worker.tlsPool.put(key, std::move(up_), std::move(address));
  }
  up_.reset();
  upClean_ = false;
}

asio::awaitable<std::optional<Refusal>> InterceptSession::acquire(const policy::Decision& d,
                                                                  RequestLog& log, bool mayReuse,
                                                                  bool& reused) {
  const std::string& credential = d.credential;
  auto& rec = log.record;
  const auto& limits = c_.limits();
  reused = false;
  if (up_ && (!mayReuse || !upClean_ || up_->credential != credential)) {
    releaseUpstream();  // a clean one verified for another credential goes to the pool
  }
  if (!up_ && mayReuse) {
    if (auto idle = c_.worker.tlsPool.take(poolKeyFor(credential))) up_ = std::move(idle->conn);
  }
  if (up_) {
    rec.upstream = up_->address;
    reused = true;
    upClean_ = false;  // until this exchange ends cleanly
    co_return std::nullopt;
  }
  Refusal dialRefusal;
  auto dialed = co_await dialForClient(c_, d, target_, port_, log, &dialRefusal);
  if (!dialed) co_return dialRefusal;
  auto conn = std::make_shared<UpstreamTlsConnection>(
      std::move(*dialed), c_.snap->upstreamTls->contextFor(credential).native_handle());
  conn->credential = credential;
  conn->address = rec.upstream;
  SSL* ssl = conn->tls.native_handle();
  // Always verified: the chain against the context's roots, and the name (or address) the
  // client asked for (RFC 6125, see verifyPeerAs).
  if (!verifyPeerAs(ssl, target_.name, target_.isAddress)) {
    co_return Refusal{
        .status = 502,
        .reason = reason::kUpstreamTlsFailed,
        .task = rec.task,
        .host = rec.host,
        .rule = rec.rule,
        .detail = fmt::format("TLS to {} ({}) could not be set up", rec.host, rec.upstream),
        .outcome = Outcome::kError};
  }
  conn->stream.expires_after(toDuration(limits.connectTimeout));
  auto ec = co_await conn->tls.handshake();
  if (ec) {
    long vr = SSL_get_verify_result(ssl);
    std::string why = vr != X509_V_OK ? X509_verify_cert_error_string(vr) : ec.message();
    co_return Refusal{
        .status = 502,
        .reason = reason::kUpstreamTlsFailed,
        .task = rec.task,
        .host = rec.host,
        .rule = rec.rule,
        .detail = fmt::format("TLS to {} ({}) failed: {}", rec.host, rec.upstream, why),
        .outcome = Outcome::kError};
  }
  up_ = std::move(conn);
  upClean_ = false;
  co_return std::nullopt;
}

asio::awaitable<HeadRead> InterceptSession::readHead() {
  const auto& limits = c_.limits();
  beast::get_lowest_layer(tls_).expires_after(toDuration(limits.idleTimeout));
  return readRequestHead(in_, limits.maxHeaderBytes,
                         [this](auto into) { return tls_.readSome(into); });
}

std::optional<Refusal> InterceptSession::checkRequest(Request& req, RequestLog& log) {
  auto& rec = log.record;
  std::string target(req.target());  // "/…": notOriginForm() and the validator saw to that
  path_ = target.substr(0, target.find('?'));
  // Never the query: it may carry a key.
  rec.path = path_;
  auto hostIt = req.find(http::field::host);
  if (hostIt != req.end() && policy::matchesTarget(hostIt->value(), target_, port_, 443)) {
    return std::nullopt;
  }
  return Refusal{
      .status = 421,
      .reason = reason::kMisdirectedRequest,
      .task = rec.task,
      .host = rec.host,
      .detail = fmt::format("the Host header must name the CONNECT host '{}'", target_.name),
      .hint = "send requests for another host through their own CONNECT"};
}

void InterceptSession::rewriteHead(Request& req, bool websocket) {
  if (websocket) {
    // The one hop-by-hop pair that must reach the upstream: it asks for the switch.
    req.set(http::field::connection, "Upgrade");
    req.set(http::field::upgrade, "websocket");
    req.erase(http::field::sec_websocket_extensions);  // frames stay readable to be scrubbed
  }
}

// One request; true when the connection may carry another.
asio::awaitable<bool> InterceptSession::one() {
  const HeadRead read = co_await readHead();
  const bool cut = read.status == HeadStatus::kClosed || read.status == HeadStatus::kTimeout;
  if (cut && in_.size() == 0) co_return false;  // between requests: how a connection ends
  // Decided against the configuration current now (see session.cc).
  bool reloaded = false;
  auto revoked = refreshSnapshot(c_, &reloaded);
  if (reloaded) creds_.emplace(c_);
  // No request in the tunnel carries the task token that opened it: it is checked again here
  // (expiry with leeway, its key, its jti), so that an expired or revoked token's tunnel gets
  // no credential injected (issue #38).
  if (!revoked) revoked = recheckToken(c_);
  const TaskEntry& task = *c_.task;
  RequestLog log;
  identifyRequest(c_, log);
  auto& rec = log.record;
  rec.time = std::chrono::system_clock::now();
  rec.kind = audit_kind::kIntercept;
  rec.client = c_.client;
  rec.listener = c_.listener->name;
  rec.task = task.name;
  rec.scheme = "https";
  rec.host = target_.name;
  rec.port = port_;
  if (cut) {  // inside a request head (see session.cc)
    noteCutHead(rec, read.status, in_.size());
    finishRequest(c_, log);
    co_return false;
  }
  if (revoked) {
    co_await refuse(log, *revoked);
    co_return false;
  }
  if (read.status != HeadStatus::kComplete) {
    const bool malformed = read.status == HeadStatus::kMalformed;
    Refusal r{.status = malformed ? 400 : 431,
              .reason = malformed ? reason::kBadRequestLine : reason::kHeaderTooLarge,
              .task = task.name,
              .host = rec.host,
              .detail = "malformed or oversized request head"};
    co_await refuse(log, r);
    co_return false;
  }
  const size_t headLen = read.length;
  std::string_view raw(static_cast<const char*>(in_.data().data()), headLen);
  // Refused like a Host naming another host, before the shared validator judges an
  // absolute-form target's scheme and authority as it would a proxy request's.
  if (notOriginForm(raw)) {
    rec.method = std::string(raw.substr(0, raw.find(' ')));
    Refusal r{
        .status = 421,
        .reason = reason::kMisdirectedRequest,
        .task = task.name,
        .host = rec.host,
        .detail = fmt::format("requests inside the tunnel to '{}' must use origin-form (/path)",
                              target_.name),
        .hint = "send the path alone; requests for another host go through their own CONNECT"};
    co_await refuse(log, r);
    co_return false;
  }
  RequestHead head;
  if (auto e = validateRequestHead(raw, &head)) {
    rec.method = std::string(head.method);
    Refusal r{.status = 400,
              .reason = e->reason,
              .task = task.name,
              .host = rec.host,
              .detail = e->detail};
    co_await refuse(log, r);
    co_return false;
  }
  rec.method = method_ = std::string(head.method);
  co_return co_await runExchange(*this, c_, headLen, log);
}

// The upstream switched to WebSocket: its 101 goes to the client, then bytes both ways until
// either side ends or the connection idles. The connection serves nothing after it.
asio::awaitable<void> InterceptSession::switchProtocols(RequestLog& log, ResponseParser& rp) {
  auto& rec = log.record;
  auto& res = rp.get();
  stripHopByHop(res);
  res.version(11);
  res.set(http::field::connection, "Upgrade");
  res.set(http::field::upgrade, "websocket");
  if (const std::string ext = selectedWebsocketExtensions(res); !ext.empty()) {
    up_.reset();
    Refusal refusal = websocketExtensionRefusal(ext, c_.task->name, rec.host, rec.rule);
    co_await refuse(log, refusal);
    co_return;
  }
  std::optional<broker::Scrubber> scrubber;
  std::unique_ptr<broker::BodyDecoder> decoder;  // never made: a 101 has no body
  creds_->scrubHeaders(res, false, log, scrubber, decoder);
  creds_->countScrubs(scrubber);
  rec.kind = audit_kind::kWebsocket;
  rec.status = 101;
  http::response_serializer<http::buffer_body> sr(res);
  beast::get_lowest_layer(tls_).expires_after(toDuration(c_.limits().bodyTimeout));
  auto [ec, n] = co_await httpWrite(tls_, sr, HttpStep::kHeader);
  if (ec) {
    rec.error = fmt::format("client: {}", ec.message());
  } else {
    auto idle = toDuration(c_.limits().idleTimeout);
    auto relayed = co_await relayWebsocket(tls_, in_, up_->tls, up_->buf, idle, creds_->scrubSet(),
                                           c_.metrics.get());
    rec.bytesUp += relayed.bytesUp;
    rec.bytesDown += relayed.bytesDown;
    if (relayed.idleTimeout) {
      rec.reason = reason::kIdleTimeout;
      rec.error = "idle timeout";
    } else if (!relayed.error.empty()) {
      rec.error = relayed.error;
    }
  }
  finishRequest(c_, log);
  // The upstream connection carried a WebSocket: it is never reused.
  up_.reset();
}

asio::awaitable<void> InterceptSession::run() {
  // Not `while (co_await one())`: GCC 12 miscompiles co_await in a loop condition.
  while (true) {
    bool more = co_await one();
    if (!more) break;
  }
  // A connection that ended its last response cleanly goes to the worker's pool for the
  // task's next connection to this host; its TLS session is not shut down.
  releaseUpstream();
}

}  // namespace

asio::awaitable<void> serveIntercepted(ClientConnection& c, TlsChannel& tls,
                                       const policy::Target& target, uint16_t port) {
  InterceptSession session(c, tls, target, port);
  co_await session.run();
}

}  // namespace sandgate::proxy
