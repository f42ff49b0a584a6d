// Building the upstream TLS client contexts (see upstream_tls.h).
#include "proxy/net/upstream_tls.h"

#include <fmt/format.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace sandgate::proxy {

namespace ssl = boost::asio::ssl;

namespace {

// Verification is never optional: a failure is a 502, never a fallback to an unverified
// connection (the secret would go to whoever answers).
Result<std::shared_ptr<ssl::context>> makeContext(const config::Config& cfg,
                                                  const std::string* extra,
                                                  const std::string& keyPath) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_compression);
  ctx->set_verify_mode(ssl::verify_peer);
  boost::system::error_code ec;
  for (const std::string* bundle : {cfg.tls.upstreamCa ? &*cfg.tls.upstreamCa : nullptr, extra}) {
    if (!bundle) continue;
    ctx->load_verify_file(*bundle, ec);
    if (ec) {
      return Diagnostics{{cfg.file, 0, 0, keyPath,
                          fmt::format("cannot load CA bundle '{}': {}", *bundle, ec.message())}};
    }
  }
  static constexpr unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(ctx->native_handle(), kAlpn, sizeof(kAlpn));
  return ctx;
}

}  // namespace

Result<std::shared_ptr<const UpstreamTls>> UpstreamTls::build(const config::Config& cfg) {
  auto out = std::make_shared<UpstreamTls>();
  auto base = makeContext(cfg, nullptr, "tls.upstream_ca");
  if (!base) return base.errors();
  out->base_ = base.value();
  for (const auto& [name, cred] : cfg.credentials) {
    if (!cred.upstreamCa) continue;
    auto ctx = makeContext(cfg, &*cred.upstreamCa, "credentials." + name + ".upstream_ca");
    if (!ctx) return ctx.errors();
    out->perCredential_.emplace(name, ctx.value());
  }
  return std::shared_ptr<const UpstreamTls>(std::move(out));
}

ssl::context& UpstreamTls::contextFor(std::string_view credential) const {
  std::call_once(systemRoots_, [this] {
    // No system store is not fatal: the extra bundles may be all a deployment trusts.
    boost::system::error_code ec;
    base_->set_default_verify_paths(ec);
    for (const auto& [name, ctx] : perCredential_) ctx->set_default_verify_paths(ec);
  });
  auto it = perCredential_.find(credential);
  return it == perCredential_.end() ? *base_ : *it->second;
}

bool verifyPeerAs(SSL* ssl, const std::string& host, bool isAddress) {
  if (ssl == nullptr || SSL_set_min_proto_version(ssl, TLS1_2_VERSION) != 1) return false;
  SSL_set_verify(ssl, SSL_VERIFY_PEER, nullptr);
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (isAddress) return X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) == 1;
  X509_VERIFY_PARAM_set_hostflags(
      param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
  return X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0) == 1 &&
         SSL_set_tlsext_host_name(ssl, host.c_str()) == 1;
}

}  // namespace sandgate::proxy
