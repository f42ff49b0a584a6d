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
#include "proxy/intercept/intercept_session.h"
#include "proxy/net/tls_channel.h"
#include "proxy/observe/metrics.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ssl = asio::ssl;

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
  c.stream.expires_after(toDuration(limits.headerTimeout));
  auto hec = co_await tls.handshake();
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
  co_await serveIntercepted(c, tls, target, port);
  live.noteEnd(rec);
  if (!c.abortive) {
    c.stream.expires_after(std::chrono::seconds(1));
    co_await tls.shutdown();
  }
  finishRequest(c, log);
}

}  // namespace sandgate::proxy
