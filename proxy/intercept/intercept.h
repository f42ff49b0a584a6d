// TLS interception of CONNECTs whose rule needs to see requests: the server-wide state (CA,
// leaf cache, server TLS context) and the intercepted session itself.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <string>

#include "broker/store.h"
#include "ca/tls_ca.h"
#include "common/result.h"
#include "config/config.h"
#include "policy/engine.h"

namespace sandgate::proxy {

struct ClientConnection;
struct RequestLog;

// Lives as long as the server: the CA is kept across reloads (a sandbox's trust store cannot
// change while it runs).
class Interception {
 public:
  // Loads `ca:` (or creates an ephemeral CA) and writes `ca_cert_out` if set. Any failure is
  // a start-up error: interception fails closed, never into a plain tunnel.
  static Result<std::shared_ptr<Interception>> create(const config::Config& cfg);

  LeafCache& leaves() { return *leaves_; }
  // The CA certificate clients must trust (PEM). Public.
  std::string caCertificatePem() const { return ca_->certificatePem(); }
  boost::asio::ssl::context& serverContext() { return *server_; }

  // Upstreams that answered an h2 offer with HTTP/1.1, remembered for kH1OnlyMemo so that an h2
  // client to them is not made to wait, each time, for a probe connection that is thrown away
  // (curl and browsers offer h2 to every host). Keyed by host:port; at most kH1OnlyMemoSize.
  static constexpr std::chrono::minutes kH1OnlyMemo{10};
  static constexpr size_t kH1OnlyMemoSize = 4096;
  bool knownH1Only(const std::string& hostPort);
  void rememberH1Only(const std::string& hostPort);

 private:
  std::mutex h1OnlyMutex_;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> h1Only_;
  std::shared_ptr<const CertificateAuthority> ca_;
  std::unique_ptr<LeafCache> leaves_;
  std::unique_ptr<boost::asio::ssl::context> server_;
};

// An allowed CONNECT with decision.intercept set; c.buffer holds the bytes the client sent
// after the CONNECT head. Answers 200, terminates TLS with a leaf for target, then serves
// the requests on it. Always ends the connection.
boost::asio::awaitable<void> handleIntercept(ClientConnection& c, const policy::Target& target,
                                             uint16_t port, const policy::Decision& decision,
                                             RequestLog& log);

}  // namespace sandgate::proxy
