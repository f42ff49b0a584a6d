// Dialling an HTTP/2 upstream (see h2_upstream.h).
#include "proxy/h2/h2_upstream.h"

#include <openssl/ssl.h>

#include <cstring>

#include "proxy/client/client_connection.h"
#include "proxy/net/upstream_tls.h"
#include "proxy/upstream/upstream.h"

namespace sandgate::proxy {

namespace asio = boost::asio;

asio::awaitable<std::unique_ptr<H2Upstream>> dialH2Upstream(
    ClientConnection& c, const policy::Decision& allowed, const policy::Target& target,
    uint16_t port, RequestLog& log, bool* h1Only) {
  *h1Only = false;
  if (!c.snap->upstreamTls) co_return nullptr;
  Refusal refusal;
  auto dialed = co_await dialForClient(c, allowed, target, port, log, &refusal);
  if (!dialed) co_return nullptr;
  auto up = std::make_unique<H2Upstream>(
      std::move(*dialed), c.snap->upstreamTls->contextFor(allowed.credential).native_handle());
  up->credential = allowed.credential;
  up->address = log.record.upstream;
  SSL* ssl = up->tls.native_handle();
  if (!up->tls.ok() || !verifyPeerAs(ssl, target.name, target.isAddress)) co_return nullptr;
  static constexpr unsigned char kAlpn[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  if (SSL_set_alpn_protos(ssl, kAlpn, sizeof(kAlpn)) != 0) co_return nullptr;
  up->stream.expires_after(toDuration(c.limits().connectTimeout));
  if (auto ec = co_await up->tls.handshake()) co_return nullptr;
  const unsigned char* proto = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl, &proto, &len);
  if (len != 2 || std::memcmp(proto, "h2", 2) != 0) {
    *h1Only = true;
    co_return nullptr;
  }
  co_return up;
}

}  // namespace sandgate::proxy
