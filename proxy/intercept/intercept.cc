// TLS interception: the server-wide state (CA, leaf cache, server context, placeholders) and
// the CONNECT side of an intercepted connection: 200, then TLS with a leaf minted for the
// CONNECT host (fed the bytes already read) and the SNI check. The requests on it are served
// by intercept_session.cc.
#include "proxy/intercept/intercept.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/error.hpp>

#include "policy/host.h"
#include "proxy/client/client_connection.h"
#include "proxy/h2/h2_proxy.h"
#include "proxy/intercept/intercept_session.h"
#include "proxy/net/tls_channel.h"
#include "proxy/observe/metrics.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ssl = asio::ssl;

namespace {

// What a connection's handshake knows about HTTP/2, for the callbacks below (ex_data).
struct AlpnChoice {
  bool decided = false;  // the upstream has been asked: the handshake may go on
  bool offersH2 = false;
  bool useH2 = false;  // the upstream selected h2: so may the client
};

int alpnIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// Does an ALPN extension's body (RFC 7301: a 2-byte length, then length-prefixed names) list h2?
bool listsH2(const unsigned char* p, size_t len) {
  if (len < 2) return false;
  size_t total = (size_t{p[0]} << 8) | p[1];
  if (total + 2 != len) return false;
  for (size_t i = 2; i < len;) {
    const size_t n = p[i];
    if (n == 0 || i + 1 + n > len) return false;
    if (n == 2 && p[i + 1] == 'h' && p[i + 2] == '2') return true;
    i += 1 + n;
  }
  return false;
}

// Pauses the handshake of a client that offers h2 (SSL_CLIENT_HELLO_RETRY) on a connection that
// may use it, so that the upstream is asked before the client's ALPN is answered.
int clientHello(SSL* ssl, int*, void*) {
  auto* choice = static_cast<AlpnChoice*>(SSL_get_ex_data(ssl, alpnIndex()));
  if (!choice || choice->decided) return SSL_CLIENT_HELLO_SUCCESS;
  const unsigned char* ext = nullptr;
  size_t len = 0;
  if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &ext,
                                &len) == 1 &&
      listsH2(ext, len)) {
    choice->offersH2 = true;
    return SSL_CLIENT_HELLO_RETRY;
  }
  choice->decided = true;
  return SSL_CLIENT_HELLO_SUCCESS;
}

}  // namespace

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
  // A client offering h2 pauses the handshake at its ClientHello (clientHello) until the
  // upstream has said whether it speaks h2; the answer then selects h2 or http/1.1. A client
  // offering only h2 to an upstream that does not gets no ALPN and must fall back.
  SSL_CTX_set_client_hello_cb(ctx, &clientHello, nullptr);
  SSL_CTX_set_alpn_select_cb(
      ctx,
      [](SSL* ssl, const unsigned char** outp, unsigned char* outlen, const unsigned char* in,
         unsigned int inlen, void*) -> int {
        static constexpr unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
        static constexpr unsigned char kBoth[] = {2,   'h', '2', 8,   'h', 't',
                                                  't', 'p', '/', '1', '.', '1'};
        const auto* choice = static_cast<const AlpnChoice*>(SSL_get_ex_data(ssl, alpnIndex()));
        const bool h2 = choice && choice->useH2;
        unsigned char* sel = nullptr;
        if (SSL_select_next_proto(&sel, outlen, h2 ? kBoth : kHttp11,
                                  h2 ? sizeof(kBoth) : sizeof(kHttp11), in,
                                  inlen) == OPENSSL_NPN_NEGOTIATED) {
          *outp = sel;
          return SSL_TLSEXT_ERR_OK;
        }
        return SSL_TLSEXT_ERR_NOACK;
      },
      nullptr);
  return out;
}

bool Interception::knownH1Only(const std::string& hostPort) {
  std::lock_guard lock(h1OnlyMutex_);
  auto it = h1Only_.find(hostPort);
  if (it == h1Only_.end()) return false;
  if (std::chrono::steady_clock::now() < it->second) return true;
  h1Only_.erase(it);  // it may speak h2 by now: ask again
  return false;
}

void Interception::rememberH1Only(const std::string& hostPort) {
  std::lock_guard lock(h1OnlyMutex_);
  if (h1Only_.size() >= kH1OnlyMemoSize) h1Only_.clear();  // bounded; a probe is all it costs
  h1Only_[hostPort] = std::chrono::steady_clock::now() + kH1OnlyMemo;
}

asio::awaitable<void> handleIntercept(ClientConnection& c, const policy::Target& target,
                                      uint16_t port, const policy::Decision& decision,
                                      RequestLog& log) {
  auto& rec = log.record;
  const TaskEntry& task = *c.task;
  const auto& limits = c.limits();
  Interception& icpt = *c.state.interception;
  // An intercepted CONNECT holds a tunnel slot like a plain one: same capacity, same limit.
  TaskSlot tunnelSlot = co_await acquireTunnelSlot(c, log);
  if (!tunnelSlot) co_return;
  std::string leafError;
  auto leaf = icpt.leaves().get(target.name, &leafError);
  if (!leaf || !c.snap->secrets || !c.snap->upstreamTls) {
    Refusal refusal{
        .status = 502,
        .reason = reason::kInterceptionUnavailable,
        .task = task.name,
        .host = rec.host,
        .rule = decision.rule,
        .detail = leaf ? "interception is not configured" : "no certificate for this host",
        .outcome = Outcome::kError};
    co_await refuse(c, log, refusal);
    co_return;
  }
  if (c.state.metrics) c.state.metrics->leafCache(icpt.leaves().hits(), icpt.leaves().misses());

  const bool established = co_await sendEstablished(c, log, decision);
  if (!established) co_return;
  log.intercepted = true;

  TlsChannel tls(c.stream, icpt.serverContext().native_handle(), TlsChannel::Role::kServer);
  // The bytes that followed the CONNECT head are the start of the ClientHello.
  const bool fed = tls.feed(c.buffer.data());
  c.buffer.consume(c.buffer.size());
  const bool ready = tls.ok() && fed;
  if (!ready || !leaf->applyTo(tls.native_handle())) {
    rec.verdict = Outcome::kError;
    rec.reason = reason::kInterceptionUnavailable;
    rec.error = ready ? "cannot install the leaf certificate"
                      : "cannot set up TLS with the client (out of memory)";
    finishRequest(c, log);
    co_return;
  }
  // HTTP/2 where both ends speak it. A rule's git: block gates requests on HTTP/1.1 (it reads
  // a push's commands from the body before dialling), and so does an llm: rule (it reads and
  // accounts each call): their hosts are never offered h2.
  // An upstream known to answer h2 with HTTP/1.1 is not asked again: the client gets http/1.1
  // at once (Interception::knownH1Only).
  AlpnChoice alpn;
  const std::string hostPort = fmt::format("{}:{}", target.name, port);
  if (!decision.git && !decision.llm && !icpt.knownH1Only(hostPort)) {
    SSL_set_ex_data(tls.native_handle(), alpnIndex(), &alpn);
  }
  c.stream.expires_after(toDuration(limits.headerTimeout));
  auto hec = co_await tls.handshake();
  std::shared_ptr<H2Upstream> h2up;
  if (hec == asio::error::in_progress && alpn.offersH2) {
    bool h1Only = false;
    h2up = co_await dialH2Upstream(c, decision, target, port, log, &h1Only);
    if (h1Only) icpt.rememberH1Only(hostPort);
    alpn.useH2 = h2up != nullptr;
    alpn.decided = true;
    c.stream.expires_after(toDuration(limits.headerTimeout));
    hec = co_await tls.handshake();
  }
  SSL_set_ex_data(tls.native_handle(), alpnIndex(), nullptr);
  if (hec) {
    // Plaintext (or anything else) sent into an intercepted tunnel ends it. A TLS stream
    // starts with a handshake record (0x16); the client may have sent its first bytes with
    // the CONNECT head or after the 200.
    const bool plaintext = tls.firstByte() >= 0 && tls.firstByte() != 0x16;
    rec.verdict = Outcome::kDeny;
    rec.reason = hec == beast::error::timeout ? reason::kClientTimeout
                 : plaintext                  ? reason::kNotTls
                                              : reason::kClientTlsFailed;
    rec.error = fmt::format("TLS handshake with the client failed: {}", hec.message());
    finishRequest(c, log);
    co_return;
  }
  const char* sni = SSL_get_servername(tls.native_handle(), TLSEXT_NAMETYPE_host_name);
  bool sniOk = target.isAddress;  // IP literals carry no SNI
  if (sni) sniOk = policy::namesTarget(sni, target);
  if (!sniOk) {
    rec.verdict = Outcome::kDeny;
    rec.reason = reason::kSniMismatch;
    rec.error = fmt::format("TLS server name '{}' is not the CONNECT host '{}'", sni ? sni : "",
                            target.name);
    finishRequest(c, log);
    co_return;
  }
  if (c.metrics) c.metrics->tlsIntercepted();
  LiveTunnel live(c, target, port);
  const unsigned char* proto = nullptr;
  unsigned int protoLen = 0;
  SSL_get0_alpn_selected(tls.native_handle(), &proto, &protoLen);
  if (h2up && protoLen == 2 && proto[0] == 'h' && proto[1] == '2') {
    co_await serveH2(c, tls, std::move(h2up), target, port, log);
  } else {
    h2up.reset();  // the client chose http/1.1 after all: its requests dial their own
    co_await serveIntercepted(c, tls, target, port);
  }
  live.noteEnd(rec);
  if (!c.abortive) {
    c.stream.expires_after(std::chrono::seconds(1));
    co_await tls.shutdown();
  }
  finishRequest(c, log);
}

}  // namespace sandgate::proxy
