// Dialling an HTTP/2 upstream (see h2_upstream.h).
#include "proxy/h2/h2_upstream.h"

#include <openssl/ssl.h>

#include <cstring>

#include "proxy/client/client_connection.h"
#include "proxy/net/upstream_tls.h"
#include "proxy/upstream/upstream.h"

namespace sandgate::proxy {

namespace asio = boost::asio;

H2Upstream::~H2Upstream() {
  if (session) nghttp2_session_del(session);
}

// Reusable: nothing buffered inside OpenSSL, nothing unread on the socket (a GOAWAY, a PING, a
// close_notify or any stray byte from the upstream while it waited ends it).
bool PooledConnection<std::shared_ptr<H2Upstream>>::quiet(std::shared_ptr<H2Upstream>& up) {
  if (!up || !up->session || !up->tls.quiet()) return false;
  auto& socket = up->stream.socket();
  return socket.is_open() && socketIsQuiet(socket.native_handle());
}

asio::awaitable<std::shared_ptr<H2Upstream>> dialH2Upstream(ClientConnection& c,
                                                            const policy::Decision& allowed,
                                                            const policy::Target& target,
                                                            uint16_t port, RequestLog& log,
                                                            bool* h1Only) {
  *h1Only = false;
  if (!c.snap->upstreamTls) co_return nullptr;
  // Keyed as the HTTP/1.1 pool is: a connection dialled and verified for one task and
  // credential under one snapshot is never handed to another task, another credential, or a
  // request decided under a configuration that may resolve or allow the name differently.
  std::string key =
      "h2|" + poolKey(c.snap->generation, c.task->name, target.name, port, allowed.credential);
  if (auto idle = c.worker.h2Pool.take(key)) {
    log.record.upstream = idle->upstream;
    co_return std::move(idle->conn);
  }
  Refusal refusal;
  auto dialed = co_await dialForClient(c, allowed, target, port, log, &refusal);
  if (!dialed) co_return nullptr;
  auto up = std::make_shared<H2Upstream>(
      std::move(*dialed), c.snap->upstreamTls->contextFor(allowed.credential).native_handle());
  up->credential = allowed.credential;
  up->address = log.record.upstream;
  up->poolKey = std::move(key);
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

void poolH2Upstream(ClientConnection& c, std::shared_ptr<H2Upstream> up) {
  if (!up || up->poolKey.empty() || c.state.draining.load(std::memory_order_relaxed)) return;
  nghttp2_session_set_user_data(up->session, nullptr);
  std::string key = up->poolKey;
  std::string address = up->address;
  c.worker.h2Pool.put(key, std::move(up), std::move(address));
}

}  // namespace sandgate::proxy
