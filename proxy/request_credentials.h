// The broker's part in the requests of one client connection, whether they leave over verified
// TLS (interception) or as plain http:// (forwarding): placeholders checked and replaced, the
// admitting rule's credential injected, and the secrets that went upstream scrubbed from the
// responses that follow. Internal to proxy/ (forward.cc, intercept_session.cc).
#pragma once

#include <boost/beast/http/message.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "broker/injector.h"
#include "broker/scrubber.h"
#include "policy/engine.h"
#include "proxy/refusal.h"

namespace sandgate::proxy {

struct ClientConnection;
struct RequestLog;

class RequestCredentials {
 public:
  explicit RequestCredentials(ClientConnection& c) : c_(c) {}

  // Checks, then edits, a request head about to go upstream to `host` (hop-by-hop and Proxy-*
  // fields already removed): every placeholder it carries must belong to a credential whose
  // hosts cover `host`, and the admitting rule's credential must be loadable; then the
  // placeholders are replaced by their secrets (headers, Basic tokens, the query) and the
  // credential is injected. `tls`: the request leaves over verified TLS; over plain HTTP only
  // a credential with allow_plaintext may be sent (else credential_requires_tls). Sets the
  // audit record's credential and injected, counts the injection, and returns the refusal to
  // send instead (the head is then left as it was). When a secret went into the head, Accept-
  // Encoding becomes identity (scrubbing needs identity bodies), the secret's forms are kept to
  // be scrubbed from responses (unless its credential says `scrub: false`), and the head must
  // be cleansed (cleanseRequestHead) once it has been sent.
  std::optional<Refusal> apply(boost::beast::http::request_header<>& req, std::string_view host,
                               bool tls, const policy::Decision& decision, RequestLog& log);

  // Makes a scrubber for a response when secrets went upstream on this connection, and
  // scrubs the response's header fields with it at once. A body with a Content-Encoding other
  // than identity cannot be scrubbed: it is relayed as it is, with a warning in the log (once
  // per connection).
  void scrubHeaders(boost::beast::http::fields& res, std::optional<broker::Scrubber>& scrubber);
  // Counts the scrubber's replacements in the task's metrics.
  void countScrubs(const std::optional<broker::Scrubber>& scrubber) const;

 private:
  ClientConnection& c_;
  std::optional<broker::Injector> injector_;  // made on the connection's first request
  std::vector<broker::ScrubRule> scrubRules_;
  bool warnedEncoding_ = false;  // a compressed response was reported
};

// Cleanses a request head (cleanseRequestHead) when it goes out of scope.
struct CleanseOnExit {
  boost::beast::http::request_header<>& head;
  ~CleanseOnExit();
};

}  // namespace sandgate::proxy
