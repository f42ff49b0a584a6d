// The requests of one intercepted TLS connection (see intercept_session.h).
//
// WebSocket: an upgrade request passes the same Host check, policy (method and path) and
// credential injection as any request. When the upstream answers 101 with `Upgrade:
// websocket`, the 101 goes to the client and the connection becomes an opaque byte relay (see
// tls_relay.h) under the idle timeout of a tunnel; any other answer is an ordinary response.
// Frames are not scrubbed: after the switch the bytes are WebSocket frames (masked from the
// client, possibly compressed with permessage-deflate), not an identity body, so a secret the
// upstream echoes inside a frame is not replaced; only the 101's headers are scrubbed. An
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
#include "proxy/exchange/git_gate.h"
#include "proxy/exchange/headers.h"
#include "proxy/exchange/relay.h"
#include "proxy/exchange/request_credentials.h"
#include "proxy/intercept/tls_relay.h"
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

class InterceptSession {
 public:
  InterceptSession(ClientConnection& c, TlsChannel& tls, const policy::Target& target,
                   uint16_t port)
      : c_(c), tls_(tls), target_(target), port_(port), creds_(c) {}

  // Serves requests until the connection ends.
  asio::awaitable<void> run();

 private:
  asio::awaitable<bool> one();
  // Reads a request head into in_: its length, -1 malformed, -2 too large; nullopt when the
  // client is done (EOF, truncation, idle timeout).
  asio::awaitable<HeadRead> readHead();
  // Hop-by-hop and Proxy-* fields out, the credential in. Returns the refusal on failure.
  std::optional<Refusal> prepare(http::request<http::buffer_body>& req,
                                 const policy::Decision& decision, bool websocket, RequestLog& log);
  asio::awaitable<void> refuseInside(RequestLog& log, const Refusal& r);
  // Makes up_ a verified connection for `credential`: the one this session holds, else an
  // idle one of the worker's pool, else a new one (always new when !mayReuse). `reused` says
  // whether it had carried requests before (the upstream may have closed it since).
  asio::awaitable<std::optional<Refusal>> connectUpstream(const policy::Decision& d,
                                                          const std::string& credential,
                                                          RequestLog& log, bool mayReuse,
                                                          bool& reused);
  std::string poolKeyFor(const std::string& credential) const;
  // Hands up_ to the worker's pool (when it may be reused) and lets go of it.
  void releaseUpstream();
  asio::awaitable<void> switchToWebsocket(RequestLog& log, ResponseParser& rp);

  ClientConnection& c_;
  TlsChannel& tls_;
  const policy::Target& target_;
  uint16_t port_;
  beast::flat_buffer in_;  // decrypted client bytes not consumed yet
  std::shared_ptr<UpstreamTlsConnection> up_;
  // up_ ended its last exchange cleanly: the whole request sent, the whole response read,
  // nothing left over. Only then may it carry another request, here or from the pool.
  bool upClean_ = false;
  RequestCredentials creds_;
};

// `Upgrade: websocket` (one token, any case)?
bool upgradesToWebsocket(const http::fields& f) {
  auto it = f.find(http::field::upgrade);
  if (it == f.end()) return false;
  return beast::iequals(trimOws(it->value()), "websocket");
}

asio::awaitable<void> InterceptSession::refuseInside(RequestLog& log, const Refusal& refusal) {
  Refusal r = refusal;
  auto& rec = log.record;
  rec.verdict = r.outcome;
  rec.reason = r.reason;
  rec.status = r.status;
  if (rec.rule.empty()) rec.rule = r.rule;
  if (rec.error.empty() && r.outcome == Outcome::kError) rec.error = r.detail;
  std::string bytes = renderRefusal(r);
  beast::get_lowest_layer(tls_).expires_after(toDuration(c_.limits().bodyTimeout));
  const asio::const_buffer out(bytes.data(), bytes.size());
  co_await tls_.write(out);
  finishRequest(c_, log);
}

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

asio::awaitable<std::optional<Refusal>> InterceptSession::connectUpstream(
    const policy::Decision& d, const std::string& credential, RequestLog& log, bool mayReuse,
    bool& reused) {
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
  bool prepared = ssl != nullptr && SSL_set_min_proto_version(ssl, TLS1_2_VERSION) == 1;
  if (prepared) {
    // Always verified: the chain against the context's roots, and the name (or address) the
    // client asked for. SNI only for names (RFC 6066 forbids IP literals there).
    SSL_set_verify(ssl, SSL_VERIFY_PEER, nullptr);
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    if (target_.isAddress) {
      prepared = X509_VERIFY_PARAM_set1_ip_asc(param, target_.name.c_str()) == 1;
    } else {
      // RFC 6125: the name must be in a subjectAltName, never the subject's CN (a
      // certificate without SANs matches nothing); a wildcard stands for one whole left-most
      // label. An IP target is matched against iPAddress SANs only (set1_ip above).
      X509_VERIFY_PARAM_set_hostflags(
          param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
      prepared = X509_VERIFY_PARAM_set1_host(param, target_.name.c_str(), 0) == 1 &&
                 SSL_set_tlsext_host_name(ssl, target_.name.c_str()) == 1;
    }
  }
  if (!prepared) {
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

std::optional<Refusal> InterceptSession::prepare(http::request<http::buffer_body>& req,
                                                 const policy::Decision& decision, bool websocket,
                                                 RequestLog& log) {
  stripHopByHop(req);
  std::vector<std::string> proxyFields;
  for (const auto& f : req) {
    if (f.name_string().size() >= 6 && beast::iequals(f.name_string().substr(0, 6), "proxy-")) {
      proxyFields.emplace_back(f.name_string());
    }
  }
  for (const auto& n : proxyFields) req.erase(n);
  req.erase(http::field::expect);  // no 100-continue dance inside the tunnel
  req.version(11);
  if (websocket) {
    // The one hop-by-hop pair that must reach the upstream: it asks for the switch.
    req.set(http::field::connection, "Upgrade");
    req.set(http::field::upgrade, "websocket");
  }
  return creds_.apply(req, target_.name, true, decision, log);
}

// One request; true when the connection may carry another.
asio::awaitable<bool> InterceptSession::one() {
  const auto& limits = c_.limits();
  const TaskEntry& task = *c_.task;
  const HeadRead read = co_await readHead();
  if (read.status == HeadStatus::kClosed || read.status == HeadStatus::kTimeout) co_return false;
  RequestLog log;
  auto& rec = log.record;
  rec.time = std::chrono::system_clock::now();
  rec.kind = audit_kind::kIntercept;
  rec.client = c_.client;
  rec.listener = c_.listener->name;
  rec.task = task.name;
  rec.scheme = "https";
  rec.host = target_.name;
  rec.port = port_;
  if (read.status != HeadStatus::kComplete) {
    const bool malformed = read.status == HeadStatus::kMalformed;
    Refusal r{.status = malformed ? 400 : 431,
              .reason = malformed ? reason::kBadRequestLine : reason::kHeaderTooLarge,
              .task = task.name,
              .host = rec.host,
              .detail = "malformed or oversized request head"};
    co_await refuseInside(log, r);
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
        .reason = reason::kHostMismatch,
        .task = task.name,
        .host = rec.host,
        .detail = fmt::format("requests inside the tunnel to '{}' must use origin-form (/path)",
                              target_.name),
        .hint = "send the path alone; requests for another host go through their own CONNECT"};
    co_await refuseInside(log, r);
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
    co_await refuseInside(log, r);
    co_return false;
  }
  rec.method = std::string(head.method);
  http::request_parser<http::buffer_body> parser;
  parser.header_limit(static_cast<uint32_t>(std::min<uint64_t>(limits.maxHeaderBytes, UINT32_MAX)));
  parser.body_limit(boost::none);
  beast::error_code pec;
  size_t used = parser.put(asio::buffer(in_.data().data(), headLen), pec);
  if (pec || used != headLen || !parser.is_header_done()) {
    Refusal r{.status = 400,
              .reason = reason::kBadHeader,
              .task = task.name,
              .host = rec.host,
              .detail = "malformed request head"};
    co_await refuseInside(log, r);
    co_return false;
  }
  in_.consume(headLen);
  auto& req = parser.get();
  std::string target(req.target());  // "/…": notOriginForm() and the validator saw to that
  std::string path = target.substr(0, target.find('?'));
  // Never the query: it may carry a key.
  rec.path = path;
  auto hostIt = req.find(http::field::host);
  if (hostIt == req.end() || !policy::matchesTarget(hostIt->value(), target_, port_, 443)) {
    Refusal r{
        .status = 421,
        .reason = reason::kHostMismatch,
        .task = task.name,
        .host = rec.host,
        .detail = fmt::format("the Host header must name the CONNECT host '{}'", target_.name),
        .hint = "send requests for another host through their own CONNECT"};
    co_await refuseInside(log, r);
    co_return false;
  }
  const bool clientKeepAlive = req.keep_alive();
  const unsigned clientVersion = req.version();

  auto decision = decideHttpRequest(c_,
                                    policy::Request{target_, port_, std::string_view(rec.method),
                                                    std::string_view(path), std::nullopt},
                                    req);
  rec.rule = decision.rule;
  if (!decision.allowed()) {
    Refusal r = policyRefusal(decision, task.name, rec.host,
                              "ask for a policy rule that allows this request");
    co_await refuseInside(log, r);
    co_return false;
  }
  // Connection: upgrade with an Upgrade field asks to switch protocols (an Upgrade field alone
  // is a hop-by-hop field that is simply dropped).
  const bool upgrade = parser.upgrade() && req.find(http::field::upgrade) != req.end();
  const bool isWebsocket = upgrade && upgradesToWebsocket(req);
  if (upgrade && !isWebsocket) {
    Refusal r{
        .status = 400,
        .reason = reason::kUpgradeNotSupported,
        .task = task.name,
        .host = rec.host,
        .rule = decision.rule,
        .detail = fmt::format("cannot switch to '{}' here: only websocket upgrades are relayed",
                              std::string_view(req[http::field::upgrade]).substr(0, 64)),
        .hint = "send the request without Upgrade"};
    co_await refuseInside(log, r);
    co_return false;
  }

  if (decision.git) {
    const auto bodyTimeout = toDuration(limits.bodyTimeout);
    auto gate = co_await gateGitRequest(
        c_, decision, target, parser, in_, log,
        [this, bodyTimeout](asio::mutable_buffer into) {
          beast::get_lowest_layer(tls_).expires_after(bodyTimeout);
          return tls_.readSome(into);
        },
        [this, bodyTimeout](asio::const_buffer out) {
          beast::get_lowest_layer(tls_).expires_after(bodyTimeout);
          return tls_.write(out);
        });
    if (gate.action == GitGateResult::Action::kRefuse) {
      co_await refuseInside(log, gate.refusal);
      co_return false;
    }
    if (gate.action == GitGateResult::Action::kAnswered) {
      finishRequest(c_, log);
      co_return false;
    }
  }
  if (auto refusal = prepare(req, decision, isWebsocket, log)) {
    co_await refuseInside(log, *refusal);
    co_return false;
  }
  // From here the head may carry the injected credential (a header, the query).
  CleanseOnExit cleanseHead{req};
  // A reused upstream connection may have been closed by the upstream a moment ago: a request
  // without a body that fails on one before any response byte is sent again on a new one.
  const bool bodyless = parser.is_done();
  std::optional<ResponseParser> rp;
  beast::error_code rec_ec;
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = false;
    if (auto refusal =
            co_await connectUpstream(decision, decision.credential, log, attempt == 0, reused)) {
      co_await refuseInside(log, *refusal);
      co_return false;
    }
    http::request_serializer<http::buffer_body> sr(req);
    auto sent = co_await relayMessage(tls_, in_, parser, up_->tls, sr, nullptr, limits.bodyTimeout,
                                      limits.bodyTimeout, rec.bytesUp);
    if (sent.error == RelayError::kRead) {
      noteClientReadFailure(sent, rec);
      finishRequest(c_, log);
      co_return false;
    }
    if (sent.error == RelayError::kWrite) {
      up_.reset();
      if (reused && bodyless) continue;
      Refusal r = upstreamSendRefusal(sent, rec);
      co_await refuseInside(log, r);
      co_return false;
    }
    rec_ec = co_await readResponseHead(up_->tls, up_->buf, rp, req.method() == http::verb::head,
                                       limits.maxHeaderBytes, limits.idleTimeout);
    if (rec_ec && reused && bodyless && isPeerClosed(rec_ec) && up_->buf.size() == 0) {
      up_.reset();
      continue;
    }
    break;  // the second attempt is on a new connection (never reused): up_ is set here
  }
  const bool switched = !rec_ec && rp->get().result_int() == 101;
  if (rec_ec || (switched && !(isWebsocket && upgradesToWebsocket(rp->get())))) {
    up_.reset();
    UpstreamResponseFailure f{rec_ec == beast::error::timeout, rec_ec && isPeerClosed(rec_ec),
                              rec_ec ? rec_ec.message() : std::string()};
    Refusal r = upstreamResponseRefusal(f, task.name, rec.host, rec.rule, rec.upstream);
    co_await refuseInside(log, r);
    co_return false;
  }
  rec.verdict = outcomeOf(decision.verdict);
  rec.reason = decision.reason;
  if (switched) {
    co_await switchToWebsocket(log, *rp);
    co_return false;
  }

  auto& res = rp->get();
  const bool upstreamKeepAlive = res.keep_alive();
  stripHopByHop(res);
  std::optional<broker::Scrubber> scrubber;
  std::unique_ptr<broker::BodyDecoder> decoder;
  if (auto refusal = creds_.scrubHeaders(res, !rp->is_done(), log, scrubber, decoder)) {
    up_.reset();  // its body was not read
    co_await refuseInside(log, *refusal);
    co_return false;
  }
  // A body scrubbed with replacements of another length, or decoded, changes length: frame it
  // ourselves.
  const bool keepAlive = frameResponse(*rp, clientVersion, clientKeepAlive,
                                       decoder || (scrubber && !scrubber->preservesLength()));
  rec.status = res.result_int();

  auto back = co_await relayResponse(up_->tls, up_->buf, *rp, tls_, scrubber ? &*scrubber : nullptr,
                                     limits, rec, decoder.get());
  creds_.countScrubs(scrubber);
  if (back.error == RelayError::kDecode && !back.headSent) {
    // Nothing has reached the client yet: it gets the refusal instead of a cut response.
    up_.reset();
    Refusal r = undecodableBodyRefusal(back, rec);
    co_await refuseInside(log, r);
    co_return false;
  }
  finishRequest(c_, log);
  // Reused later only when both messages ended cleanly and nothing else arrived: leftover
  // bytes (or a half-read body, when the client went away) would be read as the next answer.
  upClean_ = back.error == RelayError::kNone && upstreamKeepAlive && rp->is_done() &&
             !rp->need_eof() && parser.is_done() && up_->buf.size() == 0;
  if (!upClean_) up_.reset();
  if (back.error != RelayError::kNone) co_return false;
  co_return keepAlive&& parser.is_done() && !c_.state.draining.load(std::memory_order_relaxed);
}

// The upstream switched to WebSocket: its 101 goes to the client, then bytes both ways until
// either side ends or the connection idles. The connection serves nothing after it.
asio::awaitable<void> InterceptSession::switchToWebsocket(RequestLog& log, ResponseParser& rp) {
  auto& rec = log.record;
  auto& res = rp.get();
  stripHopByHop(res);
  res.version(11);
  res.set(http::field::connection, "Upgrade");
  res.set(http::field::upgrade, "websocket");
  // The frames after it are not scrubbed (see the top of this file).
  std::optional<broker::Scrubber> scrubber;
  std::unique_ptr<broker::BodyDecoder> decoder;  // never made: a 101 has no body
  creds_.scrubHeaders(res, false, log, scrubber, decoder);
  creds_.countScrubs(scrubber);
  rec.kind = audit_kind::kWebsocket;
  rec.status = 101;
  http::response_serializer<http::buffer_body> sr(res);
  beast::get_lowest_layer(tls_).expires_after(toDuration(c_.limits().bodyTimeout));
  auto [ec, n] = co_await httpWrite(tls_, sr, HttpStep::kHeader);
  if (ec) {
    rec.error = fmt::format("client: {}", ec.message());
  } else {
    auto idle = toDuration(c_.limits().idleTimeout);
    auto relayed = co_await relayTls(tls_, in_, up_->tls, up_->buf, idle);
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
