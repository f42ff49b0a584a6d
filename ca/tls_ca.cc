// The interception CA: key generation, CA files, loading checks, leaf minting and the LRU.
#include "ca/tls_ca.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/safe_open.h"

namespace sandgate::proxy {

namespace {

using Clock = std::chrono::system_clock;
constexpr std::chrono::seconds kCaValidity{10LL * 365 * 24 * 3600};
constexpr size_t kMaxCnBytes = 64;  // ub-common-name (RFC 5280)

struct BioFree {
  void operator()(BIO* p) const { BIO_free_all(p); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
struct BnFree {
  void operator()(BIGNUM* p) const { BN_free(p); }
};
struct X509ExtFree {
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};

// The most recent OpenSSL error as text (and the queue cleared, so it cannot leak into the
// next unrelated check).
std::string opensslError() {
  unsigned long code = ERR_peek_last_error();
  std::string out = "unknown OpenSSL error";
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    out = buf;
  }
  ERR_clear_error();
  return out;
}

Diagnostic error(std::string file, std::string message) {
  Diagnostic d;
  d.file = std::move(file);
  d.message = std::move(message);
  return d;
}

EvpPkeyPtr newP256Key() { return EvpPkeyPtr(EVP_EC_gen("P-256")); }

bool setRandomSerial(X509* cert) {
  std::unique_ptr<BIGNUM, BnFree> bn(BN_new());
  // 128 random bits (RFC 5280 allows up to 20 octets; CAs/B Forum asks for 64+ random bits).
  do {
    if (!bn || BN_rand(bn.get(), 128, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1) return false;
  } while (BN_is_zero(bn.get()));
  return BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) != nullptr;
}

bool addExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, X509ExtFree> ext(
      X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  return ext && X509_add_ext(cert, ext.get(), -1) == 1;
}

const EVP_MD* digestFor(EVP_PKEY* key) {
  int id = EVP_PKEY_get_base_id(key);
  // EdDSA signs the message itself and takes no separate digest.
  return (id == EVP_PKEY_ED25519 || id == EVP_PKEY_ED448) ? nullptr : EVP_sha256();
}

Clock::time_point toTimePoint(const ASN1_TIME* t) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return Clock::time_point{};
  return Clock::from_time_t(timegm(&tm));
}

bool setName(X509_NAME* name, const char* field, const std::string& value) {
  return X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                    reinterpret_cast<const unsigned char*>(value.c_str()), -1, -1,
                                    0) == 1;
}

Result<X509Ptr> makeCaCert(EVP_PKEY* key, const std::string& commonName) {
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1 || !setRandomSerial(cert.get())) {
    return error("", "cannot create CA certificate: " + opensslError());
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (!setName(name, "O", "sandgate") || !setName(name, "CN", commonName) ||
      X509_set_issuer_name(cert.get(), name) != 1) {
    return error("", "cannot name CA certificate: " + opensslError());
  }
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), kCaValidity.count());
  X509_set_pubkey(cert.get(), key);
  // pathlen:0: this CA signs leaves only, never another CA.
  if (!addExt(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !addExt(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !addExt(cert.get(), cert.get(), NID_subject_key_identifier, "hash") ||
      !addExt(cert.get(), cert.get(), NID_authority_key_identifier, "keyid:always")) {
    return error("", "cannot add CA extensions: " + opensslError());
  }
  if (X509_sign(cert.get(), key, digestFor(key)) <= 0) {
    return error("", "cannot sign CA certificate: " + opensslError());
  }
  return cert;
}

std::string randomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    return "0";
  }
  std::string out;
  for (unsigned char c : raw) out += fmt::format("{:02x}", c);
  return out;
}

// Writes `data` to a new file created with `mode` (O_EXCL: never through an existing file or
// symlink, so an attacker cannot pre-create the key file with looser permissions; no link is
// followed on the way either).
std::optional<std::string> writeNewFile(const std::string& path, mode_t mode,
                                        const std::string& data) {
  int fd = safe_open::openNoSymlinks(path, O_WRONLY | O_CREAT | O_EXCL, mode);
  if (fd < 0) {
    return fmt::format("cannot create {}: {}", path, safe_open::describeError(errno));
  }
  std::optional<std::string> err;
  // umask may have removed bits; set exactly the mode asked for (never more than it).
  if (::fchmod(fd, mode) != 0) err = fmt::format("cannot chmod {}: {}", path, std::strerror(errno));
  if (!err && !safe_open::writeAll(fd, data)) {
    err = fmt::format("cannot write {}: {}", path, std::strerror(errno));
  }
  if (!err && ::fsync(fd) != 0) err = fmt::format("cannot sync {}: {}", path, std::strerror(errno));
  ::close(fd);
  if (err) ::unlink(path.c_str());
  return err;
}

std::string pemOf(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// Never prompts on a terminal for a passphrase: an encrypted key is simply an error.
int noPassword(char*, int, int, void*) { return -1; }

}  // namespace

// ---- Leaf -------------------------------------------------------------------------------

bool Leaf::applyTo(SSL* ssl) const {
  return SSL_use_certificate(ssl, cert.get()) == 1 && SSL_use_PrivateKey(ssl, key.get()) == 1 &&
         SSL_check_private_key(ssl) == 1;
}

bool Leaf::applyTo(SSL_CTX* ctx) const {
  return SSL_CTX_use_certificate(ctx, cert.get()) == 1 &&
         SSL_CTX_use_PrivateKey(ctx, key.get()) == 1 && SSL_CTX_check_private_key(ctx) == 1;
}

std::optional<std::string> normaliseLeafHost(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty() || host.size() > 253) return std::nullopt;
  std::string h(host);
  for (char& c : h) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  unsigned char addr[16];
  char text[INET6_ADDRSTRLEN];
  if (inet_pton(AF_INET, h.c_str(), addr) == 1) {
    return std::string(inet_ntop(AF_INET, addr, text, sizeof text));
  }
  if (inet_pton(AF_INET6, h.c_str(), addr) == 1) {
    return std::string(inet_ntop(AF_INET6, addr, text, sizeof text));
  }
  // DNS name: the value goes into an X.509 config string ("DNS:<host>"), so nothing but
  // letters, digits, '-', '_' and dots can reach it.
  size_t labelStart = 0;
  for (size_t i = 0; i <= h.size(); ++i) {
    if (i == h.size() || h[i] == '.') {
      size_t len = i - labelStart;
      if (len == 0 || len > 63 || h[labelStart] == '-' || h[i - 1] == '-') return std::nullopt;
      labelStart = i + 1;
      continue;
    }
    char c = h[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return std::nullopt;
  }
  return h;
}

// ---- CertificateAuthority ----------------------------------------------------------------

CertificateAuthority::CertificateAuthority(X509Ptr cert, EvpPkeyPtr key, LeafOptions options)
    : cert_(std::move(cert)), key_(std::move(key)), options_(options) {}

Result<std::shared_ptr<const CertificateAuthority>> CertificateAuthority::load(
    const std::string& certPath, const std::string& keyPath, LeafOptions options) {
  ERR_clear_error();
  BioPtr certBio(BIO_new_file(certPath.c_str(), "r"));
  if (!certBio) {
    return error(certPath, fmt::format("cannot read CA certificate: {}", std::strerror(errno)));
  }
  X509Ptr cert(PEM_read_bio_X509(certBio.get(), nullptr, noPassword, nullptr));
  if (!cert) return error(certPath, "not a PEM certificate: " + opensslError());

  BioPtr keyBio(BIO_new_file(keyPath.c_str(), "r"));
  if (!keyBio) {
    return error(keyPath, fmt::format("cannot read CA key: {}", std::strerror(errno)));
  }
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(keyBio.get(), nullptr, noPassword, nullptr));
  if (!key) {
    return error(keyPath, "not an unencrypted PEM private key: " + opensslError());
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return error(keyPath, fmt::format("the key does not match the certificate {}", certPath));
  }
  uint32_t flags = X509_get_extension_flags(cert.get());
  if (!(flags & EXFLAG_CA)) {
    return error(certPath, "the certificate is not a CA (basicConstraints CA:TRUE missing)");
  }
  if ((flags & EXFLAG_KUSAGE) && !(X509_get_key_usage(cert.get()) & KU_KEY_CERT_SIGN)) {
    return error(certPath, "the CA certificate's keyUsage does not allow keyCertSign");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) <= 0) {
    return error(certPath, "the CA certificate has expired");
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert.get())) >= 0) {
    return error(certPath, "the CA certificate is not valid yet");
  }
  return std::make_shared<const CertificateAuthority>(std::move(cert), std::move(key), options);
}

Result<std::shared_ptr<const CertificateAuthority>> CertificateAuthority::createEphemeral(
    LeafOptions options) {
  EvpPkeyPtr key = newP256Key();
  if (!key) return error("", "cannot generate CA key: " + opensslError());
  // A distinct name per run, so trust stores and logs can tell ephemeral CAs apart.
  auto cert = makeCaCert(key.get(), "sandgate ephemeral CA " + randomHex(4));
  if (!cert) return cert.errors();
  return std::make_shared<const CertificateAuthority>(std::move(cert).value(), std::move(key),
                                                      options);
}

Result<CertificateAuthority::Files> CertificateAuthority::init(const std::string& dir, bool force) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return error(dir, fmt::format("cannot create directory: {}", std::strerror(errno)));
  }
  Files files{dir + "/ca.pem", dir + "/ca.key", ""};
  for (const auto& path : {files.certPath, files.keyPath}) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (!force) return error(path, "already exists; refusing to overwrite (use --force)");
      if (::unlink(path.c_str()) != 0) {
        return error(path, fmt::format("cannot remove: {}", std::strerror(errno)));
      }
    }
  }
  EvpPkeyPtr key = newP256Key();
  if (!key) return error("", "cannot generate CA key: " + opensslError());
  auto cert = makeCaCert(key.get(), "sandgate CA");
  if (!cert) return cert.errors();

  BioPtr keyBio(BIO_new(BIO_s_secmem()));
  if (!keyBio || PEM_write_bio_PrivateKey(keyBio.get(), key.get(), nullptr, nullptr, 0, nullptr,
                                          nullptr) != 1) {
    return error(files.keyPath, "cannot encode key: " + opensslError());
  }
  char* data = nullptr;
  long n = BIO_get_mem_data(keyBio.get(), &data);
  std::string keyPem(data, static_cast<size_t>(n));
  auto keyErr = writeNewFile(files.keyPath, 0600, keyPem);
  OPENSSL_cleanse(keyPem.data(), keyPem.size());
  if (keyErr) return error(files.keyPath, *keyErr);
  if (auto certErr = writeNewFile(files.certPath, 0644, pemOf(cert->get()))) {
    ::unlink(files.keyPath.c_str());
    return error(files.certPath, *certErr);
  }
  CertificateAuthority ca(std::move(cert).value(), std::move(key), {});
  files.fingerprint = ca.fingerprintSha256();
  return files;
}

Result<std::string> CertificateAuthority::writeCertificate(const std::string& path) const {
  // ca_cert_out may be in a workspace (that is how a sandbox can get the CA), where an earlier
  // run could have planted links: none is followed, and a link at `path` itself is replaced.
  if (auto err = safe_open::replaceFile(path, certificatePem(), 0644)) {
    return Diagnostic{"", 0, 0, "ca_cert_out", *err};
  }
  return path;
}

std::string CertificateAuthority::certificatePem() const { return pemOf(cert_.get()); }

std::string CertificateAuthority::fingerprintSha256() const {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  X509_digest(cert_.get(), EVP_sha256(), md, &len);
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    if (i) out += ':';
    out += fmt::format("{:02X}", md[i]);
  }
  return out;
}

std::shared_ptr<const Leaf> CertificateAuthority::mint(std::string_view rawHost,
                                                       std::string* err) const {
  auto fail = [&](std::string what) -> std::shared_ptr<const Leaf> {
    if (err) *err = std::move(what);
    return nullptr;
  };
  auto host = normaliseLeafHost(rawHost);
  if (!host) return fail("not a host name or IP address a certificate can be issued for");
  unsigned char ip[16];
  bool isIp = host->find(':') != std::string::npos || inet_pton(AF_INET, host->c_str(), ip) == 1;

  auto leaf = std::make_shared<Leaf>();
  leaf->host = *host;
  leaf->key = newP256Key();
  leaf->cert.reset(X509_new());
  X509* cert = leaf->cert.get();
  if (!leaf->key || !cert || X509_set_version(cert, X509_VERSION_3) != 1 ||
      !setRandomSerial(cert)) {
    return fail("cannot create leaf: " + opensslError());
  }
  X509_NAME* name = X509_get_subject_name(cert);
  bool hasCn = host->size() <= kMaxCnBytes;
  if ((hasCn && !setName(name, "CN", *host)) ||
      X509_set_issuer_name(cert, X509_get_subject_name(cert_.get())) != 1) {
    return fail("cannot name leaf: " + opensslError());
  }
  X509_gmtime_adj(X509_getm_notBefore(cert), -options_.backdate.count());
  X509_gmtime_adj(X509_getm_notAfter(cert), options_.validity.count());
  // A leaf outliving its CA would fail verification in a confusing way; cut it short instead.
  if (ASN1_TIME_compare(X509_get0_notAfter(cert), X509_get0_notAfter(cert_.get())) > 0) {
    X509_set1_notAfter(cert, X509_get0_notAfter(cert_.get()));
  }
  X509_set_pubkey(cert, leaf->key.get());
  // SAN is exactly this host: the leaf is useless for any other name, even if it leaked.
  std::string san = (isIp ? "IP:" : "DNS:") + *host;
  if (!hasCn) san = "critical," + san;  // RFC 5280: SAN critical when the subject is empty
  if (!addExt(cert, cert_.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !addExt(cert, cert_.get(), NID_key_usage, "critical,digitalSignature") ||
      !addExt(cert, cert_.get(), NID_ext_key_usage, "serverAuth") ||
      !addExt(cert, cert_.get(), NID_subject_key_identifier, "hash") ||
      !addExt(cert, cert_.get(), NID_authority_key_identifier, "keyid:always") ||
      !addExt(cert, cert_.get(), NID_subject_alt_name, san)) {
    return fail("cannot add leaf extensions: " + opensslError());
  }
  if (X509_sign(cert, key_.get(), digestFor(key_.get())) <= 0) {
    return fail("cannot sign leaf: " + opensslError());
  }
  leaf->notAfter = toTimePoint(X509_get0_notAfter(cert));
  return leaf;
}

// ---- LeafCache ---------------------------------------------------------------------------

LeafCache::LeafCache(std::shared_ptr<const CertificateAuthority> ca, size_t capacity,
                     std::chrono::seconds renewBefore)
    : ca_(std::move(ca)), capacity_(capacity == 0 ? 1 : capacity), renewBefore_(renewBefore) {}

std::shared_ptr<const Leaf> LeafCache::get(std::string_view rawHost, std::string* err) {
  auto host = normaliseLeafHost(rawHost);
  if (!host) {
    if (err) *err = "not a host name or IP address a certificate can be issued for";
    return nullptr;
  }
  {
    std::lock_guard lock(mu_);
    auto it = index_.find(*host);
    if (it != index_.end()) {
      if (Clock::now() + renewBefore_ < it->second->second->notAfter) {
        ++hits_;
        order_.splice(order_.begin(), order_, it->second);
        return it->second->second;
      }
      order_.erase(it->second);
      index_.erase(it);
    }
    ++misses_;
  }
  // Minting (key generation + signature) runs unlocked so other hosts are not held up; two
  // threads racing on one new host both mint and the later one's leaf is kept.
  auto leaf = ca_->mint(*host, err);
  if (!leaf) return nullptr;
  std::lock_guard lock(mu_);
  if (auto it = index_.find(*host); it != index_.end()) {
    order_.erase(it->second);
    index_.erase(it);
  }
  order_.emplace_front(*host, leaf);
  index_[*host] = order_.begin();
  while (order_.size() > capacity_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
  return leaf;
}

uint64_t LeafCache::hits() const {
  std::lock_guard lock(mu_);
  return hits_;
}
uint64_t LeafCache::misses() const {
  std::lock_guard lock(mu_);
  return misses_;
}
size_t LeafCache::size() const {
  std::lock_guard lock(mu_);
  return order_.size();
}

}  // namespace sandgate::proxy
