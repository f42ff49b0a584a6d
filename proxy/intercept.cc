// The intercepted session: 200, TLS with a leaf minted for the CONNECT host (fed the bytes
// already read), then per request: Host check, policy on method and path, credential
// injection, verified TLS upstream, and the response streamed back through the scrubber.
#include "proxy/intercept.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <charconv>

#include "broker/injector.h"
#include "broker/scrubber.h"
#include "policy/host.h"
#include "proxy/metrics.h"
#include "proxy/session.h"
#include "proxy/upstream.h"
#include "proxy/upstream_tls.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using asio::ip::tcp;

Result<std::shared_ptr<Interception>> Interception::create(const config::Config& cfg) {
  auto out = std::make_shared<Interception>();
  if (cfg.ca) {
    auto ca = CertificateAuthority::load(cfg.ca->cert, cfg.ca->key);
    if (!ca) return ca.errors();
    out->ca_ = ca.value();
  } else {
    auto ca = CertificateAuthority::createEphemeral();
    if (!ca) return ca.errors();
    out->ca_ = ca.value();
  }
  if (cfg.caCertOut) {
    auto w = out->ca_->writeCertificate(*cfg.caCertOut);
    if (!w) return w.errors();
  }
  out->leaves_ = std::make_unique<LeafCache>(out->ca_, std::max<size_t>(1, cfg.tls.leafCacheSize));
  out->server_ = std::make_unique<ssl::context>(ssl::context::tls_server);
  SSL_CTX* ctx = out->server_->native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  // Only HTTP/1.1 is spoken inside the tunnel: a client offering h2 and http/1.1 gets
  // http/1.1; one offering only h2 gets no ALPN and must fall back.
  SSL_CTX_set_alpn_select_cb(
      ctx,
      [](SSL*, const unsigned char** outp, unsigned char* outlen, const unsigned char* in,
         unsigned int inlen, void*) -> int {
        static constexpr unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
        unsigned char* sel = nullptr;
        if (SSL_select_next_proto(&sel, outlen, kHttp11, sizeof(kHttp11), in, inlen) ==
            OPENSSL_NPN_NEGOTIATED) {
          *outp = sel;
          return SSL_TLSEXT_ERR_OK;
        }
        return SSL_TLSEXT_ERR_NOACK;
      },
      nullptr);
  return out;
}

std::shared_ptr<const broker::PlaceholderSet> Interception::placeholdersFor(
    const std::string& task, const std::map<std::string, config::Credential>& credentials,
    const broker::SecretStore& store) {
  std::lock_guard lock(mu_);
  auto& slot = placeholders_[task];
  if (!slot) slot = broker::PlaceholderSet::generate(credentials, store);
  return slot;
}

namespace {

// The client's tcp_stream, read through the bytes that arrived with the CONNECT head first:
// the start of the ClientHello must not be lost when the stream changes protocol.
class PrefixedStream {
 public:
  using executor_type = beast::tcp_stream::executor_type;
  using next_layer_type = beast::tcp_stream;
  using lowest_layer_type = beast::tcp_stream;

  explicit PrefixedStream(beast::tcp_stream& s) : s_(s) {}
  executor_type get_executor() { return s_.get_executor(); }
  beast::tcp_stream& next_layer() { return s_; }
  beast::tcp_stream& lowest_layer() { return s_; }
  beast::flat_buffer& prefix() { return prefix_; }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& b, Token&& token) {
    return asio::async_initiate<Token, void(beast::error_code, size_t)>(
        [this](auto handler, const MutableBuffers& bufs) {
          if (prefix_.size() == 0) {
            s_.async_read_some(bufs, std::move(handler));
            return;
          }
          size_t n = asio::buffer_copy(bufs, prefix_.data());
          prefix_.consume(n);
          auto ex = asio::get_associated_executor(handler, s_.get_executor());
          asio::post(
              ex, [h = std::move(handler), n]() mutable { std::move(h)(beast::error_code{}, n); });
        },
        token, b);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& b, Token&& token) {
    return s_.async_write_some(b, std::forward<Token>(token));
  }

 private:
  beast::tcp_stream& s_;
  beast::flat_buffer prefix_;
};

using ClientTls = ssl::stream<PrefixedStream>;

constexpr std::string_view kIntercept = "intercept";
constexpr std::string_view kHostMismatch421 = "host_mismatch";
constexpr std::string_view kClientTlsFailed = "client_tls_failed";

struct UpstreamConn {
  UpstreamConn(tcp::socket s, ssl::context& ctx) : tls(beast::tcp_stream(std::move(s)), ctx) {}
  ssl::stream<beast::tcp_stream> tls;
  beast::flat_buffer buf;
  std::string credential;  // the context it was verified with
  std::string address;
};

bool isClose(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message ||
         ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == ssl::error::stream_truncated;
}

enum class RelayError { kNone, kRead, kWrite };
struct RelayOutcome {
  RelayError error = RelayError::kNone;
  beast::error_code ec;
};

// Streams a message body from `in` to `out` one buffer at a time. With a scrubber, every
// piece passes through it first (it holds back at most a needle's length between pieces).
template <bool isRequest, class In, class Out>
asio::awaitable<RelayOutcome> relayBody(In& in, beast::flat_buffer& inBuf,
                                        http::parser<isRequest, http::buffer_body>& p, Out& out,
                                        http::serializer<isRequest, http::buffer_body>& sr,
                                        broker::Scrubber* scrub, config::Seconds readTimeout,
                                        config::Seconds writeTimeout, uint64_t& bytes) {
  beast::get_lowest_layer(out).expires_after(toDuration(writeTimeout));
  if (auto [ec, n] = co_await http::async_write_header(out, sr, kUse); ec) {
    co_return RelayOutcome{RelayError::kWrite, ec};
  }
  std::array<char, 16 * 1024> buf;
  std::string emitted;
  bool finished = false;
  RelayOutcome result;
  while (!sr.is_done()) {
    auto& body = p.get().body();
    emitted.clear();
    size_t n = 0;
    if (!p.is_done()) {
      body.data = buf.data();
      body.size = buf.size();
      beast::get_lowest_layer(in).expires_after(toDuration(readTimeout));
      auto [ec, r] = co_await http::async_read_some(in, inBuf, p, kUse);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        result = RelayOutcome{RelayError::kRead, ec};
        break;
      }
      n = buf.size() - body.size;
      bytes += n;
    }
    const bool last = p.is_done();
    if (scrub) {
      scrub->feed(std::string_view(buf.data(), n), emitted);
      if (last && !finished) {
        scrub->finish(emitted);
        finished = true;
      }
      body.data = emitted.empty() ? nullptr : emitted.data();
      body.size = emitted.size();
    } else {
      // An empty piece must not reach the serializer as data: in chunked framing a
      // zero-length chunk is the end of the body.
      body.data = n > 0 ? buf.data() : nullptr;
      body.size = n;
    }
    body.more = !last;
    beast::get_lowest_layer(out).expires_after(toDuration(writeTimeout));
    auto [ec, w] = co_await http::async_write(out, sr, kUse);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      result = RelayOutcome{RelayError::kWrite, ec};
      break;
    }
  }
  // The raw upstream bytes may hold a secret the scrubber just replaced.
  OPENSSL_cleanse(buf.data(), buf.size());
  co_return result;
}

broker::Headers toBrokerHeaders(const http::fields& f) {
  broker::Headers out;
  for (const auto& field : f) {
    out.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  return out;
}

void replaceFields(http::fields& f, broker::Headers& hs) {
  f.clear();
  for (auto& [name, value] : hs) f.insert(name, value);
  for (auto& [name, value] : hs) broker::wipe(value);
}

// The Host header names the CONNECT host (and port, when not the TLS default)?
bool hostMatches(std::string_view hostHeader, const policy::Target& target, uint16_t port) {
  std::string_view h = hostHeader;
  uint16_t hp = 443;
  if (!h.empty() && h.front() == '[') {
    auto close = h.find(']');
    if (close == std::string_view::npos) return false;
    std::string_view rest = h.substr(close + 1);
    h = h.substr(1, close - 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      rest.remove_prefix(1);
      unsigned v = 0;
      auto r = std::from_chars(rest.data(), rest.data() + rest.size(), v);
      if (r.ec != std::errc() || r.ptr != rest.data() + rest.size() || v > 65535) return false;
      hp = static_cast<uint16_t>(v);
    }
  } else if (auto colon = h.rfind(':'); colon != std::string_view::npos) {
    std::string_view ps = h.substr(colon + 1);
    unsigned v = 0;
    auto r = std::from_chars(ps.data(), ps.data() + ps.size(), v);
    if (r.ec != std::errc() || r.ptr != ps.data() + ps.size() || v > 65535) return false;
    hp = static_cast<uint16_t>(v);
    h = h.substr(0, colon);
  }
  if (hp != port) return false;
  auto n = policy::normalizeHost(h);
  auto* t = std::get_if<policy::Target>(&n);
  return t && t->name == target.name;
}

class InterceptSession {
 public:
  InterceptSession(ClientConnection& c, ClientTls& tls, const policy::Target& target, uint16_t port,
                   Interception& icpt)
      : c_(c), tls_(tls), target_(target), port_(port), icpt_(icpt) {}

  // Serves requests until the connection ends; returns bytes each way for the CONNECT line.
  asio::awaitable<void> run();

 private:
  asio::awaitable<bool> one();
  asio::awaitable<void> refuseInside(RequestLog& log, const Refusal& r, std::string_view verdict);
  asio::awaitable<std::optional<Refusal>> connectUpstream(const policy::Decision& d,
                                                          const std::string& credential,
                                                          RequestLog& log);

  ClientConnection& c_;
  ClientTls& tls_;
  const policy::Target& target_;
  uint16_t port_;
  Interception& icpt_;
  beast::flat_buffer in_;  // decrypted client bytes not consumed yet
  std::unique_ptr<UpstreamConn> up_;
  std::optional<broker::Injector> injector_;
  std::vector<broker::ScrubRule> scrubRules_;
};

asio::awaitable<void> InterceptSession::refuseInside(RequestLog& log, const Refusal& refusal,
                                                     std::string_view verdict) {
  Refusal r = refusal;
  auto& rec = log.record;
  rec.verdict = verdict;
  rec.reason = r.reason;
  rec.status = r.status;
  if (rec.rule.empty()) rec.rule = r.rule;
  if (rec.error.empty() && verdict == "error") rec.error = r.detail;
  std::string bytes = renderRefusal(r);
  beast::get_lowest_layer(tls_).expires_after(toDuration(c_.limits().bodyTimeout));
  co_await asio::async_write(tls_, asio::buffer(bytes), kUse);
  finishRequest(c_, log);
}

asio::awaitable<std::optional<Refusal>> InterceptSession::connectUpstream(
    const policy::Decision& d, const std::string& credential, RequestLog& log) {
  auto& rec = log.record;
  const auto& limits = c_.limits();
  const std::string& task = c_.task->name;
  if (up_ && up_->credential == credential) {
    rec.upstream = up_->address;
    co_return std::nullopt;
  }
  up_.reset();
  auto own = c_.state.ownEndpoints.load();
  auto dial = co_await dialUpstream(*c_.snap, d, target_, port_, *own, limits.connectTimeout,
                                    c_.state.metrics.get());
  rec.upstream = dial.upstream;
  if (!dial.ok()) {
    rec.rule = dial.decision.rule;
    co_return Refusal{dial.status,        dial.reason, task, rec.host,
                      dial.decision.rule, dial.detail, ""};
  }
  auto conn = std::make_unique<UpstreamConn>(std::move(*dial.socket),
                                             c_.snap->upstreamTls->contextFor(credential));
  conn->credential = credential;
  conn->address = dial.upstream;
  SSL* ssl = conn->tls.native_handle();
  SSL_set_min_proto_version(ssl, TLS1_2_VERSION);
  // SNI only for names (RFC 6066 forbids IP literals there); the name is verified either way.
  if (!target_.isAddress) {
    SSL_set_tlsext_host_name(ssl, target_.name.c_str());
  }
  conn->tls.set_verify_mode(ssl::verify_peer);
  conn->tls.set_verify_callback(ssl::host_name_verification(target_.name));
  beast::get_lowest_layer(conn->tls).expires_after(toDuration(limits.connectTimeout));
  auto [ec] = co_await conn->tls.async_handshake(ssl::stream_base::client, kUse);
  if (ec) {
    long vr = SSL_get_verify_result(ssl);
    std::string why = vr != X509_V_OK ? X509_verify_cert_error_string(vr) : ec.message();
    co_return Refusal{
        502,      reason::kUpstreamTlsFailed,
        task,     rec.host,
        rec.rule, fmt::format("TLS to {} ({}) failed: {}", rec.host, rec.upstream, why),
        ""};
  }
  up_ = std::move(conn);
  co_return std::nullopt;
}

// One request; true when the connection may carry another.
asio::awaitable<bool> InterceptSession::one() {
  const auto& limits = c_.limits();
  const TaskEntry& task = *c_.task;
  // The head, bounded, read from the decrypted stream.
  const size_t limit = limits.maxHeaderBytes;
  beast::get_lowest_layer(tls_).expires_after(toDuration(limits.idleTimeout));
  size_t scanned = 0;
  long end = 0;
  while (true) {
    std::string_view view(static_cast<const char*>(in_.data().data()), in_.size());
    end = findHeadEnd(view, scanned);
    if (end != 0) break;
    scanned = view.size();
    if (view.size() >= limit) {
      end = -2;
      break;
    }
    size_t room = std::min<size_t>(limit + 4 - view.size(), 16 * 1024);
    auto [ec, n] = co_await tls_.async_read_some(in_.prepare(room), kUse);
    in_.commit(n);
    if (ec) co_return false;  // EOF, truncation, timeout: the client is done
  }
  RequestLog log;
  auto& rec = log.record;
  rec.time = std::chrono::system_clock::now();
  rec.kind = kIntercept;
  rec.client = c_.client;
  rec.listener = c_.listener->name;
  rec.task = task.name;
  rec.scheme = "https";
  rec.host = target_.name;
  rec.port = port_;
  if (end < 0 || static_cast<size_t>(end) > limit) {
    Refusal r{end == -1 ? 400 : 431,
              end == -1 ? reason::kBadRequestLine : reason::kHeaderTooLarge,
              task.name,
              rec.host,
              "",
              "malformed or oversized request head",
              ""};
    co_await refuseInside(log, r, "deny");
    co_return false;
  }
  const size_t headLen = static_cast<size_t>(end);
  std::string_view raw(static_cast<const char*>(in_.data().data()), headLen);
  RequestHead head;
  if (auto e = validateRequestHead(raw, &head)) {
    rec.method = std::string(head.method);
    Refusal r{400, e->reason, task.name, rec.host, "", e->detail, ""};
    co_await refuseInside(log, r, "deny");
    co_return false;
  }
  rec.method = std::string(head.method);
  http::request_parser<http::buffer_body> parser;
  parser.header_limit(static_cast<uint32_t>(std::min<uint64_t>(limit, UINT32_MAX)));
  parser.body_limit(boost::none);
  beast::error_code pec;
  size_t used = parser.put(asio::buffer(in_.data().data(), headLen), pec);
  if (pec || used != headLen || !parser.is_header_done()) {
    Refusal r{400, reason::kBadHeader, task.name, rec.host, "", "malformed request head", ""};
    co_await refuseInside(log, r, "deny");
    co_return false;
  }
  in_.consume(headLen);
  auto& req = parser.get();
  std::string target(req.target());
  if (target.empty() || target.front() != '/') {
    Refusal r{400,       reason::kBadTarget,
              task.name, rec.host,
              "",        "requests inside an intercepted tunnel must use origin-form (/path)",
              ""};
    co_await refuseInside(log, r, "deny");
    co_return false;
  }
  std::string path = target.substr(0, target.find('?'));
  // Never the query: it may carry a key.
  rec.path = path;
  auto hostIt = req.find(http::field::host);
  if (hostIt == req.end() || !hostMatches(hostIt->value(), target_, port_)) {
    Refusal r{421,
              kHostMismatch421,
              task.name,
              rec.host,
              "",
              fmt::format("the Host header must name the CONNECT host '{}'", target_.name),
              "send requests for another host through their own CONNECT"};
    co_await refuseInside(log, r, "deny");
    co_return false;
  }
  const bool clientKeepAlive = req.keep_alive();
  const unsigned clientVersion = req.version();

  policy::Request preq{target_, port_, std::string_view(rec.method), std::string_view(path)};
  auto decision = c_.snap->engine->decide(task.name, preq);
  rec.rule = decision.rule;
  if (!decision.allowed()) {
    Refusal r{403,
              decision.reason,
              task.name,
              rec.host,
              decision.rule,
              decision.detail,
              "ask for a policy rule that allows this request"};
    co_await refuseInside(log, r, "deny");
    co_return false;
  }

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

  // Credentials: checks first, then edits (the injector leaves a refused request untouched).
  if (!injector_) {
    auto placeholders =
        icpt_.placeholdersFor(task.name, c_.snap->config.credentials, *c_.snap->secrets);
    injector_.emplace(c_.snap->secrets, c_.snap->config.credentials, placeholders);
  }
  broker::Headers hs = toBrokerHeaders(req);
  broker::OutgoingRequest out{target_.name, true, &hs, &target};
  auto inj = injector_->apply(out, decision.credential);
  rec.credential = inj.credential;
  auto* tm = c_.metrics.get();
  if (!inj.ok()) {
    for (auto& [n, v] : hs) broker::wipe(v);
    if (tm && !inj.credential.empty()) tm->credentialInjection(inj.credential, inj.reason);
    const int status = inj.reason == broker::reason::kCredentialUnavailable ? 502 : 403;
    Refusal r{status, inj.reason, task.name, rec.host, decision.rule, inj.detail, ""};
    co_await refuseInside(log, r, status == 502 ? "error" : "deny");
    co_return false;
  }
  const bool injected = !inj.scrub.empty() || !decision.credential.empty();
  rec.injected = injected;
  if (tm && !decision.credential.empty()) tm->credentialInjection(decision.credential, "ok");
  replaceFields(req, hs);
  req.target(target);
  broker::wipe(target);
  if (injected) {
    // Scrubbing needs identity bodies: no compressed response may hide a secret.
    req.erase(http::field::accept_encoding);
  }
  for (auto& rule : inj.scrub) broker::addScrubRule(scrubRules_, std::move(rule));

  if (auto refusal = co_await connectUpstream(decision, decision.credential, log)) {
    co_await refuseInside(log, *refusal, refusal->status == 403 ? "deny" : "error");
    co_return false;
  }

  http::request_serializer<http::buffer_body> sr(req);
  auto sent = co_await relayBody(tls_, in_, parser, up_->tls, sr, nullptr, limits.bodyTimeout,
                                 limits.bodyTimeout, rec.bytesUp);
  if (sent.error == RelayError::kRead) {
    rec.verdict = "error";
    rec.reason = sent.ec == beast::error::timeout ? reason::kClientTimeout : "client_closed";
    rec.error = sent.ec.message();
    finishRequest(c_, log);
    co_return false;
  }
  if (sent.error == RelayError::kWrite) {
    up_.reset();
    Refusal r{502,       reason::kUpstreamReset,
              task.name, rec.host,
              rec.rule,  fmt::format("sending to {} failed: {}", rec.upstream, sent.ec.message()),
              ""};
    co_await refuseInside(log, r, "error");
    co_return false;
  }
  std::optional<http::response_parser<http::buffer_body>> rp;
  beast::error_code rec_ec;
  while (true) {
    rp.emplace();
    rp->header_limit(static_cast<uint32_t>(std::min<uint64_t>(limit, UINT32_MAX)));
    rp->body_limit(boost::none);
    if (req.method() == http::verb::head) rp->skip(true);
    beast::get_lowest_layer(up_->tls).expires_after(toDuration(limits.idleTimeout));
    auto [ec, n] = co_await http::async_read_header(up_->tls, up_->buf, *rp, kUse);
    rec_ec = ec;
    if (ec) break;
    int status = rp->get().result_int();
    if (status >= 100 && status < 200 && status != 101) continue;
    break;
  }
  if (rec_ec || rp->get().result_int() == 101) {
    up_.reset();
    UpstreamResponseFailure f{rec_ec == beast::error::timeout, rec_ec && isClose(rec_ec),
                              rec_ec ? rec_ec.message() : std::string()};
    Refusal r = upstreamResponseRefusal(f, task.name, rec.host, rec.rule, rec.upstream);
    co_await refuseInside(log, r, "error");
    co_return false;
  }

  auto& res = rp->get();
  const bool upstreamKeepAlive = res.keep_alive();
  stripHopByHop(res);
  res.version(clientVersion);
  const bool bodyless = rp->is_done();
  bool keepAlive = clientKeepAlive;
  std::optional<broker::Scrubber> scrubber;
  if (!scrubRules_.empty()) {
    scrubber.emplace(scrubRules_);
    broker::Headers rh = toBrokerHeaders(res);
    if (scrubber->scrubHeaders(rh) > 0) {
      replaceFields(res, rh);
    } else {
      for (auto& [n, v] : rh) broker::wipe(v);
    }
  }
  if (!bodyless) {
    // A scrubbed body may change length: frame it ourselves.
    const bool reframe = scrubber.has_value() || (!rp->chunked() && !rp->content_length());
    if (clientVersion == 10 && (rp->chunked() || reframe)) {
      res.erase(http::field::content_length);
      res.chunked(false);
      keepAlive = false;
    } else if (reframe) {
      res.erase(http::field::content_length);
      res.chunked(true);
    }
  }
  res.keep_alive(keepAlive);
  rec.verdict = policy::verdictName(decision.verdict);
  rec.reason = decision.reason;
  rec.status = res.result_int();

  http::response_serializer<http::buffer_body> rsr(res);
  RelayOutcome back;
  if (bodyless) {
    beast::get_lowest_layer(tls_).expires_after(toDuration(limits.bodyTimeout));
    auto [ec, n] = co_await http::async_write_header(tls_, rsr, kUse);
    if (ec) back = RelayOutcome{RelayError::kWrite, ec};
  } else {
    back = co_await relayBody(up_->tls, up_->buf, *rp, tls_, rsr, scrubber ? &*scrubber : nullptr,
                              limits.idleTimeout, limits.bodyTimeout, rec.bytesDown);
  }
  if (scrubber && scrubber->count() > 0 && tm) {
    for (const auto& rule : scrubRules_) tm->secretScrubs(rule.credential, scrubber->count());
  }
  if (back.error == RelayError::kRead) {
    rec.error = fmt::format("upstream body: {}", back.ec.message());
    rec.reason =
        back.ec == beast::error::timeout ? reason::kUpstreamTimeout : reason::kUpstreamReset;
    rec.verdict = "error";
  } else if (back.error == RelayError::kWrite) {
    rec.error = fmt::format("client: {}", back.ec.message());
  }
  finishRequest(c_, log);
  if (back.error != RelayError::kNone) co_return false;
  if (!(upstreamKeepAlive && rp->is_done() && !rp->need_eof() && up_->buf.size() == 0)) {
    up_.reset();
  }
  co_return keepAlive&& parser.is_done() && !c_.state.draining.load(std::memory_order_relaxed);
}

asio::awaitable<void> InterceptSession::run() {
  // Not `while (co_await one())`: GCC 12 miscompiles co_await in a loop condition.
  while (true) {
    bool more = co_await one();
    if (!more) break;
  }
  // The upstream connection is simply closed: nothing is pending on it, and waiting for its
  // close_notify would only hold the client's connection open.
  up_.reset();
}

}  // namespace

asio::awaitable<void> handleIntercept(ClientConnection& c, const policy::Target& target,
                                      uint16_t port, const policy::Decision& decision,
                                      RequestLog& log) {
  auto& rec = log.record;
  const TaskEntry& task = *c.task;
  const auto& limits = c.limits();
  Interception& icpt = *c.state.interception;
  // An intercepted CONNECT holds a tunnel slot like a plain one: same capacity, same limit.
  if (!task.state->tryAcquireTunnel(task.limits.maxTunnels)) {
    Refusal refusal{429,
                    reason::kTunnelLimit,
                    task.name,
                    rec.host,
                    "",
                    fmt::format("the task already has {} tunnels", task.limits.maxTunnels),
                    "raise limits.max_tunnels for the task"};
    co_await refuse(c, log, refusal);
    co_return;
  }
  TaskSlot tunnelSlot(task.state, TaskSlot::Kind::kTunnel);
  std::string leafError;
  auto leaf = icpt.leaves().get(target.name, &leafError);
  if (!leaf || !c.snap->secrets || !c.snap->upstreamTls) {
    Refusal refusal{502,
                    reason::kInterceptionUnavailable,
                    task.name,
                    rec.host,
                    decision.rule,
                    leaf ? "interception is not configured" : "no certificate for this host",
                    ""};
    co_await refuse(c, log, refusal, "error");
    co_return;
  }
  if (c.state.metrics) c.state.metrics->leafCache(icpt.leaves().hits(), icpt.leaves().misses());

  static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";
  rec.kind = audit_kind::kTunnel;
  rec.status = 200;
  rec.verdict = policy::verdictName(decision.verdict);
  rec.reason = decision.reason;
  c.stream.expires_after(toDuration(limits.bodyTimeout));
  if (c.transparent) {
    // Captured connection: no CONNECT was sent, so there is nothing to confirm.
  } else if (auto [ec, n] = co_await asio::async_write(c.stream, asio::buffer(kEstablished), kUse);
             ec) {
    rec.error = ec.message();
    finishRequest(c, log);
    co_return;
  }

  // A TLS record starts with 0x16 (handshake); anything else is plaintext in a TLS tunnel.
  const bool plaintext =
      c.buffer.size() > 0 && static_cast<const unsigned char*>(c.buffer.data().data())[0] != 0x16;
  ClientTls tls(c.stream, icpt.serverContext());
  // The bytes that followed the CONNECT head are the start of the ClientHello.
  if (c.buffer.size() > 0) {
    auto& pre = tls.next_layer().prefix();
    size_t n = asio::buffer_copy(pre.prepare(c.buffer.size()), c.buffer.data());
    pre.commit(n);
    c.buffer.consume(c.buffer.size());
  }
  if (!leaf->applyTo(tls.native_handle())) {
    rec.verdict = "error";
    rec.reason = reason::kInterceptionUnavailable;
    rec.error = "cannot install the leaf certificate";
    finishRequest(c, log);
    co_return;
  }
  c.stream.expires_after(toDuration(limits.headerTimeout));
  auto [hec] = co_await tls.async_handshake(ssl::stream_base::server, kUse);
  if (hec) {
    // Plaintext (or anything else) sent into an intercepted tunnel ends it.
    rec.verdict = "deny";
    rec.reason = hec == beast::error::timeout ? reason::kClientTimeout
                 : plaintext                  ? reason::kNotTls
                                              : kClientTlsFailed;
    rec.error = fmt::format("TLS handshake with the client failed: {}", hec.message());
    finishRequest(c, log);
    co_return;
  }
  const char* sni = SSL_get_servername(tls.native_handle(), TLSEXT_NAMETYPE_host_name);
  bool sniOk = target.isAddress;  // IP literals carry no SNI
  if (sni) {
    auto n = policy::normalizeHost(sni);
    auto* t = std::get_if<policy::Target>(&n);
    sniOk = t && t->name == target.name;
  }
  if (!sniOk) {
    rec.verdict = "deny";
    rec.reason = reason::kSniMismatch;
    rec.error = fmt::format("TLS server name '{}' is not the CONNECT host '{}'", sni ? sni : "",
                            target.name);
    finishRequest(c, log);
    co_return;
  }
  if (c.metrics) c.metrics->tlsIntercepted();
  {
    InterceptSession session(c, tls, target, port, icpt);
    co_await session.run();
  }
  beast::get_lowest_layer(tls).expires_after(std::chrono::seconds(1));
  co_await tls.async_shutdown(kUse);
  finishRequest(c, log);
}

}  // namespace sandgate::proxy
