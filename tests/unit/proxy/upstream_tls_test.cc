// proxy/net/upstream_tls: the system roots are read when the first request goes upstream, not when
// the contexts are built (start-up and every reload would pay for parsing the bundle).
#include "proxy/net/upstream_tls.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "ca/tls_ca.h"

namespace sandgate::proxy {
namespace {

namespace fs = std::filesystem;

// Points OpenSSL's default verify paths (SSL_CERT_FILE, SSL_CERT_DIR) at a temporary
// directory for the test, and back.
class ScopedTrustPaths {
 public:
  ScopedTrustPaths() {
    char tmpl[] = "/tmp/sandgate-upstream-tls-XXXXXX";
    dir_ = mkdtemp(tmpl);
    for (const char* name : {"SSL_CERT_FILE", "SSL_CERT_DIR"}) {
      const char* v = getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
    }
    setenv("SSL_CERT_FILE", file().c_str(), 1);
    setenv("SSL_CERT_DIR", (dir_ + "/no-such-dir").c_str(), 1);
  }
  ~ScopedTrustPaths() {
    for (const auto& [name, v] : saved_) {
      if (v) {
        setenv(name.c_str(), v->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
    fs::remove_all(dir_);
  }
  std::string file() const { return dir_ + "/roots.pem"; }

 private:
  std::string dir_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

int certificatesIn(SSL_CTX* ctx) {
  int n = 0;
  STACK_OF(X509_OBJECT)* objects = X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));
  for (int i = 0; i < sk_X509_OBJECT_num(objects); ++i) {
    if (X509_OBJECT_get_type(sk_X509_OBJECT_value(objects, i)) == X509_LU_X509) ++n;
  }
  return n;
}

TEST(UpstreamTls, SystemRootsAreReadAtFirstUseNotAtBuild) {
  ScopedTrustPaths paths;
  config::Config cfg;
  auto tls = UpstreamTls::build(cfg);
  ASSERT_TRUE(tls) << tls.errorText();
  // The bundle appears only after build(): read at build, the contexts would trust nothing.
  auto ca = CertificateAuthority::createEphemeral();
  ASSERT_TRUE(ca) << ca.errorText();
  std::ofstream(paths.file()) << ca.value()->certificatePem();
  SSL_CTX* base = tls.value()->contextFor("").native_handle();
  EXPECT_EQ(certificatesIn(base), 1);
  // Once: a later change of the file is the next snapshot's (a reload builds new contexts).
  std::ofstream(paths.file(), std::ios::app) << ca.value()->certificatePem();
  EXPECT_EQ(certificatesIn(tls.value()->contextFor("").native_handle()), 1);
}

}  // namespace
}  // namespace sandgate::proxy
