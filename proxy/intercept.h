// TLS interception of CONNECTs whose rule needs to see requests: the server-wide state (CA,
// leaf cache, server TLS context, per-task placeholders) and the intercepted session itself.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "broker/placeholder.h"
#include "broker/store.h"
#include "common/result.h"
#include "config/config.h"
#include "policy/engine.h"
#include "proxy/tls_ca.h"

namespace sandgate::proxy {

struct ClientConnection;
struct RequestLog;

// Lives as long as the server: the CA and the placeholders are kept across reloads (a
// sandbox's trust store and environment cannot change while it runs).
class Interception {
 public:
  // Loads `ca:` (or creates an ephemeral CA) and writes `ca_cert_out` if set. Any failure is
  // a start-up error: interception fails closed, never into a plain tunnel.
  static Result<std::shared_ptr<Interception>> create(const config::Config& cfg);

  LeafCache& leaves() { return *leaves_; }
  // The CA certificate clients must trust (PEM). Public.
  std::string caCertificatePem() const { return ca_->certificatePem(); }
  boost::asio::ssl::context& serverContext() { return *server_; }

  // The placeholders of the task's token clients (serve's own listeners), generated on first
  // use and then kept for the server's life. No run shares them: each run has its own
  // (Server::sandboxEnvironment).
  std::shared_ptr<const broker::PlaceholderSet> placeholdersFor(
      const std::string& task, const config::Credentials& credentials,
      const broker::SecretStore& store);

 private:
  std::shared_ptr<const CertificateAuthority> ca_;
  std::unique_ptr<LeafCache> leaves_;
  std::unique_ptr<boost::asio::ssl::context> server_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const broker::PlaceholderSet>> placeholders_;
};

// An allowed CONNECT with decision.intercept set; c.buffer holds the bytes the client sent
// after the CONNECT head. Answers 200, terminates TLS with a leaf for target, then serves
// the requests on it. Always ends the connection.
boost::asio::awaitable<void> handleIntercept(ClientConnection& c, const policy::Target& target,
                                             uint16_t port, const policy::Decision& decision,
                                             RequestLog& log);

}  // namespace sandgate::proxy
