// The TLS interception CA: creating, loading and storing it, and minting per-host leaf
// certificates (cached in a bounded LRU). OpenSSL only: no Asio or Beast in here.
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/result.h"

namespace sandgate::proxy {

struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
struct EvpPkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, EvpPkeyFree>;

// A certificate minted for one host, and its private key. Immutable; shared by every
// connection to that host (and kept alive by them after the cache evicts it).
struct Leaf {
  std::string host;  // normalised: lower-case, no trailing dot, IPv6 without brackets
  X509Ptr cert;
  EvpPkeyPtr key;
  std::chrono::system_clock::time_point notAfter;

  // Installs certificate and key on a connection (e.g. from the SNI callback) or on a per-host
  // context; both take their own references. false with OpenSSL's error queue set on failure.
  bool applyTo(SSL* ssl) const;
  bool applyTo(SSL_CTX* ctx) const;
};

// Turns a CONNECT host into the name a leaf is minted for: lower-case, one trailing dot
// removed, IPv6 brackets removed, IP literals in canonical form. nullopt for anything that is
// not a DNS name (LDH labels, '_' tolerated) or an IP literal, including wildcards.
std::optional<std::string> normaliseLeafHost(std::string_view host);

struct LeafOptions {
  std::chrono::seconds validity{24 * 3600};
  // notBefore is set this far in the past so that a client with a slow clock accepts the leaf.
  std::chrono::seconds backdate{3600};
};

class CertificateAuthority {
 public:
  // Loads `ca:` from PEM files. Errors: unreadable or unparsable files, an encrypted key, a key
  // that does not match the certificate, a certificate that is not a CA (basicConstraints
  // CA:TRUE, and keyCertSign if keyUsage is present) or is outside its validity period.
  // Interception fails closed on any of these: there is no fallback CA.
  static Result<std::shared_ptr<const CertificateAuthority>> load(const std::string& certPath,
                                                                  const std::string& keyPath,
                                                                  LeafOptions options = {});
  // A new ECDSA P-256 CA that exists only in memory (`ca:` absent): its key never touches disk.
  static Result<std::shared_ptr<const CertificateAuthority>> createEphemeral(
      LeafOptions options = {});

  struct Files {
    std::string certPath;
    std::string keyPath;
    std::string fingerprint;  // SHA-256 of the certificate, "AB:CD:..."
  };
  // `sandgate ca init`: writes DIR/ca.pem (0644) and DIR/ca.key (0600 from creation: O_EXCL,
  // O_NOFOLLOW, never a window where the key is readable by others). DIR is created 0700 if
  // missing. Refuses if either file exists unless `force`, which removes them first.
  static Result<Files> init(const std::string& dir, bool force);

  // Writes the certificate (never the key) to `path` (0644, atomic rename, no symbolic link
  // followed on the way: common/safe_open.h): `ca_cert_out:`.
  Result<std::string> writeCertificate(const std::string& path) const;

  std::string certificatePem() const;
  std::string fingerprintSha256() const;
  X509* certificate() const { return cert_.get(); }

  // Mints a fresh leaf for `host` (see LeafCache for the cached path). ECDSA P-256, SAN exactly
  // the host (DNS or IP), CN the host (when it fits in 64 bytes), random 128-bit serial,
  // CA:FALSE, digitalSignature, serverAuth, SKI/AKI, valid from now - backdate for `validity`
  // (never beyond the CA's own notAfter). Null with `*error` set on failure.
  std::shared_ptr<const Leaf> mint(std::string_view host, std::string* error) const;

  CertificateAuthority(X509Ptr cert, EvpPkeyPtr key, LeafOptions options);

 private:
  X509Ptr cert_;
  EvpPkeyPtr key_;
  LeafOptions options_;
};

// Leaves by host, least recently used evicted beyond `capacity`. Thread-safe: one lock per
// lookup (once per new TLS connection, not per byte); minting happens outside the lock.
// A cached leaf close to expiry (less than `renewBefore` left) is minted again.
class LeafCache {
 public:
  LeafCache(std::shared_ptr<const CertificateAuthority> ca, size_t capacity = 1024,
            std::chrono::seconds renewBefore = std::chrono::hours(1));

  // The leaf for `host`; null with `*error` set when the host is not a valid name or minting
  // failed (the connection must then be refused, never served with another certificate).
  std::shared_ptr<const Leaf> get(std::string_view host, std::string* error = nullptr);

  uint64_t hits() const;
  uint64_t misses() const;
  size_t size() const;
  size_t capacity() const { return capacity_; }
  const CertificateAuthority& ca() const { return *ca_; }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Leaf>>;

  std::shared_ptr<const CertificateAuthority> ca_;
  size_t capacity_;
  std::chrono::seconds renewBefore_;
  mutable std::mutex mu_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace sandgate::proxy
