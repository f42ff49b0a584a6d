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
  bool injected = false;    // the credential's secret went into the request
  // The request carried the placeholder of `credential`: on success it was where the secret
  // goes and was replaced by it; on a refusal, the refusal is about a placeholder.
  bool placeholder = false;
  // What to scrub from the response (add them to the connection's rules with addScrubRule):
  // the forms of each secret that went in, except for credentials with `scrub: false`.
  std::vector<ScrubRule> scrub;

  bool ok() const { return reason.empty(); }
};

// Does credential host pattern `pattern` (exact, or "*.suffix": any subdomain, not the apex)
// cover `host`? Case-insensitive, trailing dots ignored; anything else (e.g. "re:") never matches.
bool credentialHostMatches(std::string_view pattern, std::string_view host);

// How credential `c` goes to `host`: its `inject`, or the inject.per_host entry whose host
// pattern covers `host` (the first; config validation makes every host of `c` have one).
const config::Injection& injectionFor(const config::Credential& c, std::string_view host);

// Where credential `c` is injected on requests to `host`, for people: "header Authorization",
// "Authorization: Basic", "query parameter key". The one place a placeholder of `c` is
// honoured.
std::string injectionPlace(const config::Credential& c, std::string_view host);

// One task's view of the credentials of one snapshot. Immutable and thread-safe.
class Injector {
 public:
  // `credentials` is referred to, not copied: it must outlive the Injector (a snapshot's
  // config, which the client connection using the Injector holds).
  // `task`: whose requests these are (a github_app credential mints a token per task that
  // narrows its repositories; see SecretStore::get).
  Injector(std::shared_ptr<const SecretStore> store, const config::Credentials& credentials,
           std::shared_ptr<const PlaceholderSet> placeholders, std::string task = {});

  // Prepares `req` for sending. `credential` is the admitting rule's credential (Decision::
  // credential; empty for none). In order:
  //  1. Every placeholder of this task found in the request (see PlaceholderSet::findIn) must
  //     belong to a credential whose hosts cover req.host, else credential_host_mismatch.
  //  2. Each placeholder must be that of `credential` (a rule's methods and paths bind its
  //     credential: a request another rule admitted gets no secret), and must appear only
  //     where `credential` is injected (injectionPlace): else placeholder_misplaced. A
  //     placeholder anywhere else (User-Agent, Cookie, an X- header, a Basic token in another
  //     header, another query parameter, the path) would put the secret where the upstream may
  //     store it and hand it back through a route that carries no credential.
  //  3. `credential`, if named, must cover req.host too (else credential_host_mismatch).
  //  4. Over plain HTTP, it must allow_plaintext (credential_requires_tls).
  //  5. Its secret is fetched; if unavailable the request fails (credential_unavailable): a
  //     request never goes out without the secret it needs.
  //  6. `credential` is injected, replacing (never appending to) every header or query
  //     parameter of that name the client sent: this is what replaces a placeholder, so the
  //     only place a secret ever goes is the injection's.
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

  std::shared_ptr<const SecretStore> store_;
  const config::Credentials* credentials_;
  std::shared_ptr<const PlaceholderSet> placeholders_;
  std::string task_;
};

}  // namespace sandgate::broker
