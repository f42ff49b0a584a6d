// Client TLS contexts for intercepted requests going upstream: system roots plus the extra
// bundles of `tls.upstream_ca` and each credential's `upstream_ca`, peer verification on,
// TLS 1.2 or newer. Built once per snapshot; a bundle that cannot be loaded is a config error.
// The system roots are read when the first intercepted request goes upstream, not at build():
// parsing the distribution's bundle costs ~20 ms, which every `sandgate run` and every start
// and reload of serve would pay whether or not any host is intercepted.
#pragma once

#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/result.h"
#include "config/config.h"

namespace sandgate::proxy {

class UpstreamTls {
 public:
  static Result<std::shared_ptr<const UpstreamTls>> build(const config::Config& cfg);

  // The context for requests carrying `credential` (empty: none). Contexts are thread-safe
  // for creating connections once configured; the first call (on any thread) adds the system
  // roots to every context, and every call returns only after that is done.
  boost::asio::ssl::context& contextFor(std::string_view credential) const;

 private:
  mutable std::once_flag systemRoots_;
  std::shared_ptr<boost::asio::ssl::context> base_;
  std::map<std::string, std::shared_ptr<boost::asio::ssl::context>, std::less<>> perCredential_;
};

// Makes `ssl` (a client about to connect to `host`) verify its peer: the chain against its
// context's roots, and the name as RFC 6125 has it (subjectAltName only, never the subject's CN;
// a wildcard for one whole left-most label), or for an address (`isAddress`) its iPAddress
// SANs. SNI for names only (RFC 6066 forbids IP literals there). False when OpenSSL refused.
bool verifyPeerAs(SSL* ssl, const std::string& host, bool isAddress);

}  // namespace sandgate::proxy
