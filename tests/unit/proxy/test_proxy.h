// A Server serving one task-bound loopback listener (as `sandgate run` hands one over), with the
// run's placeholders and sandgate's CA, one worker thread (so that one idle pool serves every
// request and a test can count upstream connections), the audit log and /metrics, and the
// client side of it: plain connections, CONNECT tunnels and TLS to sandgate's leaf. api.test
// and denied.test resolve to the test's upstream; only api.test (and refused.test) is allowed.
#pragma once

#include <openssl/pem.h>
#include <openssl/x509.h>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ca/tls_ca.h"
#include "tests/unit/proxy/test_server.h"
#include "tests/unit/proxy/test_upstream.h"

namespace sandgate::proxy {

// What the secret file holds: never seen by a client, only by the upstream after injection.
inline constexpr std::string_view kTestSecret = "sk-harness-0123456789abcdefghijklmnopqrst";

struct ProxyConfig {
  uint16_t apiPort = 0;      // api.test and denied.test resolve to 127.0.0.1:apiPort
  uint16_t refusedPort = 0;  // refused.test (allowed) resolves to 127.0.0.1:refusedPort
  bool inspect = false;      // CONNECTs to api.test are intercepted
  bool credential = false;   // api.test's rule injects credential "api" (placeholder API_KEY)
  std::string limits{};      // lines under `limits:`, e.g. "  idle_timeout: 500ms\n"
  unsigned maxTunnels = 0;   // 0: the default
};

class ProxyFixture : public ServerFixture {
 protected:
  // The upstream's TLS: a CA of its own (the project's ca/ library) that sandgate trusts as
  // tls.upstream_ca, and a leaf for api.test. Made on first use.
  SSL_CTX* upstreamTls() {
    if (!upstreamCtx_) {
      auto ca = CertificateAuthority::createEphemeral();
      EXPECT_TRUE(ca.ok()) << ca.errorText();
      if (!ca.ok()) return nullptr;
      upstreamCa_ = ca.value();
      std::string error;
      auto leaf = upstreamCa_->mint("api.test", &error);
      EXPECT_TRUE(leaf) << error;
      upstreamCtx_.reset(SSL_CTX_new(TLS_server_method()));
      if (!leaf || !leaf->applyTo(upstreamCtx_.get())) return nullptr;
      auto written = upstreamCa_->writeCertificate(dir_ + "/upstream-ca.pem");
      EXPECT_TRUE(written.ok()) << written.errorText();
    }
    return upstreamCtx_.get();
  }

  // A client context that trusts the upstream's own CA (a tunnel sandgate does not intercept).
  SSL_CTX* upstreamClientTls() {
    if (!upstreamClientCtx_ && upstreamTls())
      upstreamClientCtx_ = clientContext(upstreamCa_->certificatePem());
    return upstreamClientCtx_.get();
  }

  std::string yaml(const ProxyConfig& cfg) const {
    std::string rule = "        ports: [80, 443, 7000]\n        cidrs: [127.0.0.0/8]\n";
    std::string out = "policies:\n  p:\n    allow:\n      - host: api.test\n" + rule;
    if (cfg.inspect) out += "        inspect: true\n";
    if (cfg.credential) out += "        credential: api\n";
    out += "      - host: refused.test\n" + rule;
    out += "tasks:\n  - name: t\n    policy: p\n";
    out += "resolve:\n  api.test: 127.0.0.1:" + std::to_string(cfg.apiPort) +
           "\n  denied.test: 127.0.0.1:" + std::to_string(cfg.apiPort) + "\n";
    if (cfg.refusedPort)
      out += "  refused.test: 127.0.0.1:" + std::to_string(cfg.refusedPort) + "\n";
    out += "listen:\n  metrics: 127.0.0.1:0\n";
    // Connections a test leaves open do not hold its teardown for long.
    std::string limits = "  shutdown_grace: 200ms\n" + cfg.limits;
    if (cfg.maxTunnels) limits += "  max_tunnels: " + std::to_string(cfg.maxTunnels) + "\n";
    out += "limits:\n" + limits;
    if (upstreamCtx_) out += "tls:\n  upstream_ca: " + dir_ + "/upstream-ca.pem\n";
    if (cfg.credential) {
      out += "credentials:\n  api:\n    source:\n      file: " + dir_ +
             "/api.secret\n    hosts: [api.test]\n    placeholder: API_KEY\n"
             "    allow_plaintext: true\n"
             "    inject: {header: Authorization, value: 'Bearer {secret}'}\n";
    }
    return out + auditConfig();
  }

  // Creates and starts the server; the test's listener is bound to task t.
  void startProxy(const ProxyConfig& cfg) {
    if (cfg.credential) {
      std::ofstream(dir_ + "/api.secret") << kTestSecret;
    }
    auto server = testServer(yaml(cfg), "harness.yaml", 1);
    ASSERT_TRUE(server.ok()) << server.errorText();
    server_ = std::move(server.value());
    auto env = server_->sandboxEnvironment("t");
    ASSERT_TRUE(env.ok()) << env.errorText();
    for (const auto& [name, value] : env.value().variables) {
      if (name == "API_KEY") placeholder_ = value;
    }
    if (cfg.credential) {
      ASSERT_FALSE(placeholder_.empty());
    }
    ASSERT_FALSE(env.value().caPem.empty());
    sandgateCtx_ = clientContext(env.value().caPem);
    ASSERT_TRUE(sandgateCtx_);
    int fd = listenLoopback(&proxyPort_);
    ASSERT_GE(fd, 0);
    auto adopted = server_->adoptListener(fd, "t", env.value().placeholders);
    ASSERT_TRUE(adopted.ok()) << adopted.errorText();
    auto metrics = server_->metricsAddress();
    ASSERT_TRUE(metrics);
    metricsPort_ = static_cast<uint16_t>(std::stoi(metrics->substr(metrics->rfind(':') + 1)));
    server_->start();
  }

  std::unique_ptr<Wire> dialProxy() {
    auto w = dialLoopback(proxyPort_);
    EXPECT_TRUE(w) << "cannot connect to the proxy";
    return w;
  }

  static std::string connectHead(const std::string& authority) {
    return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n";
  }

  // Sends a CONNECT and reads the answer's head into *answer; the connection when it is 200.
  std::unique_ptr<Wire> openTunnel(const std::string& authority, std::string* answer = nullptr,
                                   std::string_view early = {}) {
    auto w = dialProxy();
    if (!w || !w->send(connectHead(authority) + std::string(early))) return nullptr;
    auto head = w->readUntil("\r\n\r\n");
    if (answer) *answer = head.value_or("");
    if (!head || head->rfind("HTTP/1.1 200 ", 0) != 0) return nullptr;
    return w;
  }

  // CONNECT api.test:443 and TLS to sandgate's leaf for api.test (an intercepted tunnel).
  std::unique_ptr<Wire> openIntercepted() {
    auto w = openTunnel("api.test:443");
    EXPECT_TRUE(w) << "CONNECT api.test:443 failed";
    if (!w) return nullptr;
    const bool ok = w->startTlsClient(sandgateCtx_.get(), "api.test", "api.test");
    EXPECT_TRUE(ok) << "TLS with sandgate's leaf failed";
    return ok ? std::move(w) : nullptr;
  }

  // The audit lines so far, parsed.
  std::vector<boost::json::object> auditLines() const {
    std::vector<boost::json::object> out;
    std::istringstream in(auditText());
    for (std::string line; std::getline(in, line);) {
      boost::system::error_code ec;
      auto v = boost::json::parse(line, ec);
      if (!ec && v.is_object()) out.push_back(v.as_object());
    }
    return out;
  }

  // The first audit line that `match` accepts, waiting for it (at most 3 s): a line is written
  // when the proxy has finished with a request, which may be just after the client has its
  // answer.
  std::optional<boost::json::object> waitAudit(
      const std::function<bool(const boost::json::object&)>& match) const {
    const auto end = std::chrono::steady_clock::now() + 3s;
    do {
      for (const auto& line : auditLines()) {
        if (match(line)) return line;
      }
      std::this_thread::sleep_for(10ms);
    } while (std::chrono::steady_clock::now() < end);
    return std::nullopt;
  }

  // A line of `kind` with `reason` (a null reason: `reason` empty).
  std::optional<boost::json::object> waitAudit(std::string_view kind,
                                               std::string_view reason) const {
    return waitAudit([&](const boost::json::object& o) {
      return text(o, "kind") == kind && text(o, "reason") == reason;
    });
  }

  // The line of `kind` with `reason`, which must come and have `verdict`.
  std::optional<boost::json::object> expectAudit(std::string_view kind, std::string_view reason,
                                                 std::string_view verdict) const {
    auto line = waitAudit(kind, reason);
    EXPECT_TRUE(line) << "no audit line of kind " << kind << " with reason " << reason;
    if (line) {
      EXPECT_EQ(text(*line, "verdict"), verdict);
    }
    return line;
  }

  // Reads the proxy's own answer on `c`: a complete response with `status` and
  // X-Sandgate-Reason `reason`.
  static ClientResponse expectRefusal(Wire& c, int status, std::string_view reason) {
    auto r = readResponse(c);
    EXPECT_TRUE(r.complete) << r.error;
    EXPECT_EQ(r.status, status);
    EXPECT_EQ(r.field("X-Sandgate-Reason"), reason);
    return r;
  }

  // sandgate_requests_total of task t.
  double requests(std::string_view kind, std::string_view verdict, std::string_view reason) const {
    return metric("sandgate_requests_total", {"task=\"t\"", "kind=\"" + std::string(kind) + "\"",
                                              "verdict=\"" + std::string(verdict) + "\"",
                                              "reason=\"" + std::string(reason) + "\""});
  }

  static std::string text(const boost::json::object& o, std::string_view key) {
    auto it = o.find(key);
    return it != o.end() && it->value().is_string() ? std::string(it->value().as_string()) : "";
  }
  static int64_t number(const boost::json::object& o, std::string_view key) {
    auto it = o.find(key);
    return it != o.end() && it->value().is_int64() ? it->value().as_int64() : -1;
  }

  // The value of the series `name{labels...}` on /metrics (labels as `k="v"` strings that must
  // all appear in the series), or -1 when there is none.
  double metric(const std::string& name, const std::vector<std::string>& labels) const {
    const std::string page = tcpExchange(
        metricsPort_, "GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n", false);
    std::istringstream in(page);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(name + "{", 0) != 0) continue;
      bool all = true;
      for (const auto& l : labels) all = all && line.find(l) != std::string::npos;
      if (all) return std::stod(line.substr(line.rfind(' ') + 1));
    }
    return -1;
  }

  // Waits (at most 3 s) until the series has `value`.
  bool waitMetric(const std::string& name, const std::vector<std::string>& labels,
                  double value) const {
    const auto end = std::chrono::steady_clock::now() + 3s;
    do {
      if (metric(name, labels) == value) return true;
      std::this_thread::sleep_for(10ms);
    } while (std::chrono::steady_clock::now() < end);
    return false;
  }

  static SslCtxPtr clientContext(const std::string& caPem) {
    SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
    BIO* bio = BIO_new_mem_buf(caPem.data(), static_cast<int>(caPem.size()));
    X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    if (!ctx || !cert) {
      X509_free(cert);
      return nullptr;
    }
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), cert);
    X509_free(cert);
    return ctx;
  }

  uint16_t proxyPort_ = 0;
  uint16_t metricsPort_ = 0;
  std::string placeholder_;
  SslCtxPtr sandgateCtx_;  // trusts sandgate's CA
  std::shared_ptr<const CertificateAuthority> upstreamCa_;
  SslCtxPtr upstreamCtx_;        // the upstream's server side
  SslCtxPtr upstreamClientCtx_;  // trusts the upstream's CA
};

}  // namespace sandgate::proxy
