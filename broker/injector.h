// Injector: puts a task's credentials into an outgoing request (header template, Basic, query),
// swaps placeholders for secrets, and refuses requests that would send either to a wrong host.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "broker/headers.h"
#include "broker/placeholder.h"
#include "broker/scrubber.h"
#include "broker/store.h"
#include "config/config.h"

namespace sandgate::broker {

// The request as the proxy is about to forward it (hop-by-hop and Proxy-Authorization already
// removed). The injector edits `headers` and `target` in place.
struct OutgoingRequest {
  std::string_view host;  // where it goes: the CONNECT host for intercepted TLS, lower-case
  bool tls = true;        // leaves over verified TLS (false: plain http:// forwarding)
  Headers* headers = nullptr;
  std::string* target = nullptr;  // origin-form "/path?query"
};

struct InjectResult {
  std::string_view reason;  // empty on success; else a reason:: token and the request must not go
  std::string detail;       // one sentence for logs and the refusal body; never secret bytes
  std::string credential;   // the credential concerned (injected, or the cause of the refusal)
  bool injected = false;    // a secret went into the request (a placeholder's, the credential)
  // What to scrub from the response (add them to the connection's rules with addScrubRule):
  // the forms of each secret that went in, except for credentials with `scrub: false`.
  std::vector<ScrubRule> scrub;

  bool ok() const { return reason.empty(); }
};

// Does credential host pattern `pattern` (exact, or "*.suffix": any subdomain, not the apex)
// cover `host`? Case-insensitive, trailing dots ignored; anything else (e.g. "re:") never matches.
bool credentialHostMatches(std::string_view pattern, std::string_view host);

// One task's view of the credentials of one snapshot. Immutable and thread-safe.
class Injector {
 public:
  // `credentials` is referred to, not copied: it must outlive the Injector (a snapshot's
  // config, which the client connection using the Injector holds).
  Injector(std::shared_ptr<const SecretStore> store, const config::Credentials& credentials,
           std::shared_ptr<const PlaceholderSet> placeholders);

  // Prepares `req` for sending. `credential` is the admitting rule's credential (Decision::
  // credential; empty for none). In order:
  //  1. Every placeholder of this task found in the request (see PlaceholderSet::findIn) must
  //     belong to a credential whose hosts cover req.host, else credential_host_mismatch.
  //  2. `credential`, if named, must cover req.host too (else credential_host_mismatch).
  //  3. Over plain HTTP, each credential involved must allow_plaintext (credential_requires_tls).
  //  4. Each secret involved is fetched; any unavailable one fails the request
  //     (credential_unavailable): a request never goes out without the secret it needs.
  //  5. Placeholders are replaced by their secrets in header values, inside Basic tokens, and in
  //     the query string; then `credential` is injected, replacing (never appending to) any
  //     header or query parameter of that name that the client sent.
  // All checks come before any edit: a refused request is left exactly as it was.
  InjectResult apply(const OutgoingRequest& req, std::string_view credential) const;

  // The cheap tripwire on its own: does the request carry a placeholder of this task?
  bool containsPlaceholder(const Headers& headers, std::string_view target) const {
    return placeholders_ && placeholders_->containsAny(headers, target);
  }

  const PlaceholderSet* placeholders() const { return placeholders_.get(); }

 private:
  const config::Credential* find(std::string_view name) const;
  bool hostAllowed(const config::Credential& c, std::string_view host) const;
  std::string replacementFor(const config::Credential& c) const;

  std::shared_ptr<const SecretStore> store_;
  const config::Credentials* credentials_;
  std::shared_ptr<const PlaceholderSet> placeholders_;
};

}  // namespace sandgate::broker
