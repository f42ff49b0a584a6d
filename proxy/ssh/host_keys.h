// The keys of the SSH broker: the upstream host keys pinned by a credential's known_hosts file,
// and the broker's own host key (a file, or one generated when serve starts).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

struct ssh_key_struct;

namespace sandgate::proxy::ssh {

// One pinned key: its type name ("ssh-ed25519") and the base64 of its public blob, exactly as
// known_hosts writes them (the blob names its type too, so equal blobs are equal keys).
struct PinnedKey {
  std::string type;
  std::string blob;
};

// Host pattern as written ("git.example.com", "[git.example.com]:2222") -> its keys.
struct KnownHosts {
  std::map<std::string, std::vector<PinnedKey>, std::less<>> hosts;

  // The keys pinned for `host` on `port` (OpenSSH's "[host]:port" form for a port other than
  // 22; the bare name also matches port 22 only). Host names compare case-insensitively.
  std::vector<PinnedKey> keysFor(std::string_view host, uint16_t port) const;
};

// Parses known_hosts text. Errors name `file`:line: hashed host names ("|1|…", which cannot be
// matched without trying every name), @cert-authority and @revoked markers, wildcards and
// negations (a pin is a host, not a pattern), a key that is not valid base64 of its type.
Result<KnownHosts> parseKnownHosts(std::string_view text, const std::string& file);
// Reads and parses `path` (bounded: a known_hosts file is small).
Result<KnownHosts> loadKnownHosts(const std::string& path);

// The broker's host key, shared by every session (each session's server takes a duplicate).
class HostKey {
 public:
  // From a private key file (OpenSSH or PEM); errors name the file.
  static Result<std::shared_ptr<const HostKey>> fromFile(const std::string& path);
  // A fresh Ed25519 key (serve without `ssh.host_key`).
  static Result<std::shared_ptr<const HostKey>> generate();

  // A duplicate the caller owns (ssh_key_free), or null on failure.
  ssh_key_struct* duplicate() const;
  // "ssh-ed25519 AAAA…": the line a client's known_hosts needs after the host name.
  const std::string& publicLine() const { return publicLine_; }

  ~HostKey();
  HostKey(const HostKey&) = delete;
  HostKey& operator=(const HostKey&) = delete;

 private:
  explicit HostKey(ssh_key_struct* key);
  ssh_key_struct* key_;
  std::string publicLine_;
};

}  // namespace sandgate::proxy::ssh
