// Placeholders: the stand-in values a sandbox receives instead of real secrets, and the scan
// that finds them in a request.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "broker/headers.h"
#include "config/config.h"

namespace sandgate::broker {

class SecretStore;

struct Placeholder {
  std::string credential;  // name of the credential it stands for
  std::string variable;    // environment variable the sandbox receives it in
  std::string value;       // not a secret: the sandbox sees it
};

// Known key prefixes, longest match first. A placeholder keeps the prefix (and the length) of
// the real key, so client libraries that check a key's shape accept it.
const std::vector<std::string_view>& knownKeyPrefixes();

// A fresh random placeholder for `secret` (empty when the secret is unavailable): the secret's
// known prefix, then random [A-Za-z0-9] to the secret's length (at least kMinRandomChars random
// characters, so that a placeholder cannot turn up in a request by chance); without a known
// prefix "sandgate-placeholder-" and 32 random characters. Only the prefix and the length of
// the secret are preserved: copying character classes position by position would leak bits of
// the key. Never equal to, nor containing, nor contained in `secret`.
inline constexpr size_t kMinRandomChars = 20;
std::string makePlaceholder(std::string_view secret);

// The placeholders of one task run: generated once when the task starts and kept across config
// reloads (the sandbox's environment cannot change). Immutable, shared between threads.
class PlaceholderSet {
 public:
  // One placeholder for every credential that declares `placeholder:`, shaped after its current
  // secret in `store` (if available). Distinct per credential and per call (CSPRNG).
  static std::shared_ptr<const PlaceholderSet> generate(const config::Credentials& credentials,
                                                        const SecretStore& store);
  // For tests and for rebuilding a set that the caller already holds.
  explicit PlaceholderSet(std::vector<Placeholder> placeholders);

  const std::vector<Placeholder>& all() const { return placeholders_; }
  const Placeholder* forCredential(std::string_view credential) const;
  // VARIABLE=value pairs for the sandbox's environment.
  std::vector<std::pair<std::string, std::string>> environment() const;

  // The first placeholder of this set found in the request: in any header name or value
  // (inside the decoded token of `Authorization: Basic` too) or anywhere in the target (raw
  // and percent-decoded). `Proxy-Authorization` is skipped: it is consumed by sandgate and
  // never forwarded. nullptr when there is none. A few substring searches per header.
  const Placeholder* findIn(const Headers& headers, std::string_view target) const;
  bool containsAny(const Headers& headers, std::string_view target) const {
    return findIn(headers, target) != nullptr;
  }
  // Every placeholder of this set that findIn() would find, each once, in set order.
  std::vector<const Placeholder*> findAll(const Headers& headers, std::string_view target) const;
  // The first placeholder found in `text`, or nullptr.
  const Placeholder* findInText(std::string_view text) const;

 private:
  std::vector<Placeholder> placeholders_;
};

}  // namespace sandgate::broker
