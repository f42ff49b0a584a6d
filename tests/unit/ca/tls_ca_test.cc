// Tests for ca/tls_ca.cc: CA files (modes, no overwrite), loading checks, leaf certificates
// that verify for exactly their host, and the bounded LRU with its hit/miss counts.
#include "ca/tls_ca.h"

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace sandgate::proxy {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sandgate-ca-XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

mode_t modeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

void writeFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string pemOf(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

std::string pemOf(EVP_PKEY* key, const EVP_CIPHER* cipher = nullptr) {
  BIO* bio = BIO_new(BIO_s_mem());
  static char pass[] = "password";
  PEM_write_bio_PrivateKey(bio, key, cipher, nullptr, 0, nullptr, cipher ? pass : nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

// X509_verify_cert against `ca` alone, for `host` (DNS name or IP literal).
bool verifies(const CertificateAuthority& ca, X509* leaf, const std::string& host,
              std::string* why = nullptr) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca.certificate());
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  if (host.find(':') != std::string::npos ||
      host.find_first_not_of("0123456789.") == std::string::npos) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
  }
  bool ok = X509_verify_cert(ctx) == 1;
  if (why) *why = X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx));
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok;
}

TEST(CaInit, WritesKeyWithMode0600AndCertWith0644) {
  TempDir dir;
  umask(022);
  auto files = CertificateAuthority::init(dir.file("ca"), false);
  ASSERT_TRUE(files.ok()) << files.errorText();
  EXPECT_EQ(files->certPath, dir.file("ca") + "/ca.pem");
  EXPECT_EQ(files->keyPath, dir.file("ca") + "/ca.key");
  EXPECT_EQ(modeOf(files->keyPath), 0600);
  EXPECT_EQ(modeOf(files->certPath), 0644);
  EXPECT_EQ(modeOf(dir.file("ca")), 0700);
  EXPECT_EQ(files->fingerprint.size(), 32u * 3 - 1);
  auto ca = CertificateAuthority::load(files->certPath, files->keyPath);
  ASSERT_TRUE(ca.ok()) << ca.errorText();
  EXPECT_EQ((*ca)->fingerprintSha256(), files->fingerprint);
  // ECDSA P-256, and a CA that signs leaves only.
  EVP_PKEY* pub = X509_get0_pubkey((*ca)->certificate());
  EXPECT_EQ(EVP_PKEY_get_base_id(pub), EVP_PKEY_EC);
  EXPECT_EQ(EVP_PKEY_get_bits(pub), 256);
  EXPECT_EQ(X509_get_pathlen((*ca)->certificate()), 0);
}

TEST(CaInit, RefusesToOverwriteUnlessForced) {
  TempDir dir;
  auto first = CertificateAuthority::init(dir.path(), false);
  ASSERT_TRUE(first.ok()) << first.errorText();
  for (const char* existing : {"ca.pem", "ca.key"}) {
    SCOPED_TRACE(existing);
    TempDir other;
    writeFile(other.file(existing), "keep me");
    auto again = CertificateAuthority::init(other.path(), false);
    ASSERT_FALSE(again.ok());
    EXPECT_NE(again.errorText().find("refusing to overwrite"), std::string::npos);
    EXPECT_EQ(readFile(other.file(existing)), "keep me");
  }
  // --force replaces both, and the new key is 0600 even if the old file was world-readable.
  chmod(first->keyPath.c_str(), 0644);
  auto forced = CertificateAuthority::init(dir.path(), true);
  ASSERT_TRUE(forced.ok()) << forced.errorText();
  EXPECT_NE(forced->fingerprint, first->fingerprint);
  EXPECT_EQ(modeOf(forced->keyPath), 0600);
}

TEST(CaInit, DoesNotFollowASymlinkedKeyPath) {
  TempDir dir;
  TempDir elsewhere;
  // With --force the link itself is removed, never written through.
  ASSERT_EQ(symlink(elsewhere.file("stolen").c_str(), dir.file("ca.key").c_str()), 0);
  auto refused = CertificateAuthority::init(dir.path(), false);
  EXPECT_FALSE(refused.ok());
  auto forced = CertificateAuthority::init(dir.path(), true);
  ASSERT_TRUE(forced.ok()) << forced.errorText();
  EXPECT_FALSE(std::filesystem::exists(elsewhere.file("stolen")));
  EXPECT_FALSE(std::filesystem::is_symlink(dir.file("ca.key")));
}

TEST(CaLoad, ErrorsTable) {
  TempDir a, b, misc;
  auto caA = CertificateAuthority::init(a.path(), false);
  auto caB = CertificateAuthority::init(b.path(), false);
  ASSERT_TRUE(caA.ok() && caB.ok());
  // A leaf is not a CA.
  auto loaded = CertificateAuthority::load(caA->certPath, caA->keyPath);
  ASSERT_TRUE(loaded.ok());
  std::string err;
  auto leaf = (*loaded)->mint("leaf.example", &err);
  ASSERT_TRUE(leaf) << err;
  writeFile(misc.file("leaf.pem"), pemOf(leaf->cert.get()));
  writeFile(misc.file("leaf.key"), pemOf(leaf->key.get()));
  writeFile(misc.file("enc.key"), pemOf(leaf->key.get(), EVP_aes_128_cbc()));
  writeFile(misc.file("garbage"), "not pem");
  struct Case {
    const char* name;
    std::string cert;
    std::string key;
    const char* errorPart;
  };
  const Case cases[] = {
      {"missing_key", caA->certPath, misc.file("nope.key"), "cannot read CA key"},
      {"missing_cert", misc.file("nope.pem"), caA->keyPath, "cannot read CA certificate"},
      {"mismatched_key", caA->certPath, caB->keyPath, "does not match"},
      {"not_a_ca", misc.file("leaf.pem"), misc.file("leaf.key"), "not a CA"},
      {"encrypted_key", caA->certPath, misc.file("enc.key"), "not an unencrypted PEM private key"},
      {"garbage_cert", misc.file("garbage"), caA->keyPath, "not a PEM certificate"},
      {"garbage_key", caA->certPath, misc.file("garbage"), "not an unencrypted"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = CertificateAuthority::load(c.cert, c.key);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.errorText().find(c.errorPart), std::string::npos) << r.errorText();
  }
}

TEST(CaEphemeral, WritesOnlyTheCertificate) {
  TempDir dir;
  auto ca = CertificateAuthority::createEphemeral();
  ASSERT_TRUE(ca.ok()) << ca.errorText();
  auto written = (*ca)->writeCertificate(dir.file("ca-out.pem"));
  ASSERT_TRUE(written.ok()) << written.errorText();
  std::string pem = readFile(dir.file("ca-out.pem"));
  EXPECT_EQ(pem, (*ca)->certificatePem());
  EXPECT_EQ(pem.find("PRIVATE KEY"), std::string::npos);
  EXPECT_EQ(modeOf(dir.file("ca-out.pem")), 0644);
  // Written again (a restart): replaced atomically.
  ASSERT_TRUE((*ca)->writeCertificate(dir.file("ca-out.pem")).ok());
  size_t files = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1u) << "no temporary file left behind";
  auto other = CertificateAuthority::createEphemeral();
  EXPECT_NE((*other)->fingerprintSha256(), (*ca)->fingerprintSha256());
}

class LeafTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = CertificateAuthority::createEphemeral();
    ASSERT_TRUE(ca.ok()) << ca.errorText();
    ca_ = std::move(ca).value();
  }
  std::shared_ptr<const CertificateAuthority> ca_;
};

TEST_F(LeafTest, VerifiesForItsHostOnly) {
  struct Case {
    const char* name;
    const char* host;
    const char* verifyAs;
    const char* wrong;
  };
  const Case cases[] = {
      {"dns", "api.openai.com", "api.openai.com", "evil.openai.com"},
      {"dns_upper_trailing_dot", "GitHub.com.", "github.com", "gist.github.com"},
      {"ipv4", "127.0.0.1", "127.0.0.1", "127.0.0.2"},
      {"ipv6_bracketed", "[::1]", "::1", "::2"},
      {"single_label", "localhost", "localhost", "localhost2"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string err;
    auto leaf = ca_->mint(c.host, &err);
    ASSERT_TRUE(leaf) << err;
    std::string why;
    EXPECT_TRUE(verifies(*ca_, leaf->cert.get(), c.verifyAs, &why)) << why;
    EXPECT_FALSE(verifies(*ca_, leaf->cert.get(), c.wrong));
    // Not a wildcard in disguise: a subdomain of the host fails too.
    if (std::string(c.name).starts_with("dns")) {
      EXPECT_FALSE(verifies(*ca_, leaf->cert.get(), std::string("a.") + c.verifyAs));
    }
    // Another CA's trust does not accept it.
    auto stranger = CertificateAuthority::createEphemeral();
    EXPECT_FALSE(verifies(**stranger, leaf->cert.get(), c.verifyAs));
  }
}

TEST_F(LeafTest, Profile) {
  std::string err;
  auto leaf = ca_->mint("api.example.com", &err);
  ASSERT_TRUE(leaf) << err;
  X509* cert = leaf->cert.get();
  EXPECT_EQ(EVP_PKEY_get_base_id(leaf->key.get()), EVP_PKEY_EC);
  EXPECT_EQ(EVP_PKEY_get_bits(leaf->key.get()), 256);
  EXPECT_EQ(X509_check_private_key(cert, leaf->key.get()), 1);
  // Exactly one SAN, the host.
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  ASSERT_NE(sans, nullptr);
  ASSERT_EQ(sk_GENERAL_NAME_num(sans), 1);
  GENERAL_NAME* gn = sk_GENERAL_NAME_value(sans, 0);
  ASSERT_EQ(gn->type, GEN_DNS);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(gn->d.dNSName))),
            "api.example.com");
  GENERAL_NAMES_free(sans);
  char cn[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  EXPECT_STREQ(cn, "api.example.com");
  uint32_t flags = X509_get_extension_flags(cert);
  EXPECT_FALSE(flags & EXFLAG_CA);
  EXPECT_TRUE(flags & EXFLAG_BCONS);
  EXPECT_EQ(X509_get_key_usage(cert), static_cast<uint32_t>(KU_DIGITAL_SIGNATURE));
  EXPECT_EQ(X509_get_extended_key_usage(cert), static_cast<uint32_t>(XKU_SSL_SERVER));
  EXPECT_NE(X509_get0_subject_key_id(cert), nullptr);
  EXPECT_NE(X509_get0_authority_key_id(cert), nullptr);
  EXPECT_EQ(ASN1_OCTET_STRING_cmp(X509_get0_authority_key_id(cert),
                                  X509_get0_subject_key_id(ca_->certificate())),
            0);
  // Serial: random, large, positive, different each time.
  BIGNUM* serial = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr);
  EXPECT_GT(BN_num_bits(serial), 64);
  EXPECT_LE(BN_num_bits(serial), 128);
  EXPECT_FALSE(BN_is_negative(serial));
  BN_free(serial);
  auto again = ca_->mint("api.example.com", &err);
  EXPECT_NE(
      ASN1_INTEGER_cmp(X509_get0_serialNumber(cert), X509_get0_serialNumber(again->cert.get())), 0);
  // Valid from an hour ago for 24 hours.
  int days = 0, secs = 0;
  ASSERT_EQ(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(cert), X509_get0_notAfter(cert)), 1);
  EXPECT_EQ(days * 86400 + secs, 25 * 3600);
  ASSERT_EQ(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(cert), nullptr), 1);  // to now
  EXPECT_NEAR(days * 86400 + secs, 3600, 60);
}

TEST_F(LeafTest, LongHostHasNoCommonNameButVerifies) {
  std::string host = std::string(60, 'a') + "." + std::string(60, 'b') + ".example";
  std::string err;
  auto leaf = ca_->mint(host, &err);
  ASSERT_TRUE(leaf) << err;
  EXPECT_EQ(X509_NAME_entry_count(X509_get_subject_name(leaf->cert.get())), 0);
  EXPECT_TRUE(verifies(*ca_, leaf->cert.get(), host));
}

TEST_F(LeafTest, RefusedHostsTable) {
  const std::string cases[] = {"",
                               "*.example.com",
                               "exa mple.com",
                               "a..b",
                               "-a.example",
                               "a-.example",
                               "example.com/x",
                               "a\nb",
                               "user@host",
                               "a,DNS:evil.com",
                               "[::1",
                               std::string(64, 'a') + ".example",
                               std::string(254, 'a')};
  for (const auto& host : cases) {
    std::string err;
    EXPECT_EQ(ca_->mint(host, &err), nullptr) << host;
    EXPECT_FALSE(err.empty());
  }
}

TEST_F(LeafTest, ApplyToSslContext) {
  std::string err;
  auto leaf = ca_->mint("api.example.com", &err);
  ASSERT_TRUE(leaf);
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  EXPECT_TRUE(leaf->applyTo(ctx));
  SSL* ssl = SSL_new(ctx);
  EXPECT_TRUE(leaf->applyTo(ssl));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
}

// A full TLS 1.3 handshake over an in-memory BIO pair (no sockets): the client trusts only the
// CA and checks the host name, as a sandbox client with the CA bundle would.
bool handshake(const CertificateAuthority& ca, const Leaf& leaf, const std::string& clientHost) {
  SSL_CTX* sctx = SSL_CTX_new(TLS_server_method());
  SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
  X509_STORE_add_cert(SSL_CTX_get_cert_store(cctx), ca.certificate());
  SSL_CTX_set_verify(cctx, SSL_VERIFY_PEER, nullptr);
  SSL* server = SSL_new(sctx);
  SSL* client = SSL_new(cctx);
  EXPECT_TRUE(leaf.applyTo(server));
  SSL_set1_host(client, clientHost.c_str());
  SSL_set_tlsext_host_name(client, clientHost.c_str());
  BIO *cbio = nullptr, *sbio = nullptr;
  BIO_new_bio_pair(&cbio, 0, &sbio, 0);
  SSL_set_bio(client, cbio, cbio);
  SSL_set_bio(server, sbio, sbio);
  SSL_set_connect_state(client);
  SSL_set_accept_state(server);
  bool clientDone = false, serverDone = false, failed = false;
  for (int i = 0; i < 20 && !(clientDone && serverDone) && !failed; ++i) {
    if (!clientDone) {
      int r = SSL_do_handshake(client);
      clientDone = r == 1;
      failed = r <= 0 && SSL_get_error(client, r) != SSL_ERROR_WANT_READ;
    }
    if (!serverDone && !failed) {
      int r = SSL_do_handshake(server);
      serverDone = r == 1;
      failed = r <= 0 && SSL_get_error(server, r) != SSL_ERROR_WANT_READ;
    }
  }
  bool ok = clientDone && serverDone && SSL_get_verify_result(client) == X509_V_OK;
  SSL_free(client);
  SSL_free(server);
  SSL_CTX_free(cctx);
  SSL_CTX_free(sctx);
  ERR_clear_error();
  return ok;
}

TEST_F(LeafTest, TlsHandshakeWithTheLeaf) {
  std::string err;
  auto leaf = ca_->mint("api.example.com", &err);
  ASSERT_TRUE(leaf) << err;
  EXPECT_TRUE(handshake(*ca_, *leaf, "api.example.com"));
  EXPECT_FALSE(handshake(*ca_, *leaf, "other.example.com"));
  auto stranger = CertificateAuthority::createEphemeral();
  EXPECT_FALSE(handshake(**stranger, *leaf, "api.example.com"));
}

TEST(NormaliseLeafHost, Table) {
  const std::pair<const char*, const char*> cases[] = {
      {"Example.COM", "example.com"},
      {"example.com.", "example.com"},
      {"[::1]", "::1"},
      {"0:0::1", "::1"},
      {"127.0.0.1", "127.0.0.1"},
      {"_acme.example", "_acme.example"},
  };
  for (const auto& [in, want] : cases) {
    auto got = normaliseLeafHost(in);
    ASSERT_TRUE(got) << in;
    EXPECT_EQ(*got, want);
  }
}

TEST_F(LeafTest, CacheIsBoundedLruWithCounts) {
  LeafCache cache(ca_, 2);
  auto a = cache.get("a.example");
  auto b = cache.get("b.example");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(cache.misses(), 2u);
  EXPECT_EQ(cache.get("A.example."), a) << "same host, normalised: a hit";
  EXPECT_EQ(cache.hits(), 1u);
  auto c = cache.get("c.example");  // evicts b (least recently used), not a
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.misses(), 3u);
  EXPECT_EQ(cache.get("a.example"), a);
  EXPECT_EQ(cache.hits(), 2u);
  auto b2 = cache.get("b.example");
  EXPECT_NE(b2, b) << "b was evicted and minted again";
  EXPECT_EQ(cache.misses(), 4u);
  EXPECT_EQ(cache.size(), 2u);
  // An evicted leaf stays valid for whoever still holds it.
  EXPECT_TRUE(verifies(*ca_, b->cert.get(), "b.example"));
  std::string err;
  EXPECT_EQ(cache.get("*.example", &err), nullptr);
  EXPECT_FALSE(err.empty());
}

TEST_F(LeafTest, CacheRemintsLeavesCloseToExpiry) {
  // renewBefore longer than the validity: every cached leaf counts as about to expire.
  LeafCache cache(ca_, 8, std::chrono::hours(48));
  auto a = cache.get("a.example");
  auto again = cache.get("a.example");
  EXPECT_NE(a, again);
  EXPECT_EQ(cache.hits(), 0u);
  EXPECT_EQ(cache.misses(), 2u);
}

TEST_F(LeafTest, CacheSharedAcrossThreads) {
  LeafCache cache(ca_, 16);
  std::atomic<int> failures{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) {
          std::string host = "h" + std::to_string((i + t) % 24) + ".example";
          auto leaf = cache.get(host);
          if (!leaf || leaf->host != host) ++failures;
        }
      });
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(cache.hits() + cache.misses(), 200u);
  EXPECT_LE(cache.size(), 16u);
}

}  // namespace
}  // namespace sandgate::proxy
