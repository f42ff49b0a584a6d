// The broker's part in the requests of one client connection, whether they leave over verified
// TLS (interception) or as plain http:// (forwarding): placeholders checked, the
// admitting rule's credential injected, and the secrets that went upstream scrubbed from the
// responses that follow. Internal to proxy/ (forward.cc, intercept_session.cc).
#pragma once

#include <boost/beast/http/message.hpp>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "broker/body_decoder.h"
#include "broker/injector.h"
#include "broker/scrubber.h"
#include "broker/task_secrets.h"
#include "policy/engine.h"
#include "proxy/client/refusal.h"

namespace sandgate::proxy {

struct ClientConnection;
struct RequestLog;

class RequestCredentials {
 public:
  explicit RequestCredentials(ClientConnection& c) : c_(c) {}

  // Checks, then edits, a request head about to go upstream to `host` (hop-by-hop and Proxy-*
  // fields already removed): every placeholder it carries must belong to a credential whose
  // hosts cover `host` (else credential_host_mismatch), must be that of the admitting rule's
  // credential and stand only where it is injected (else placeholder_misplaced; see
  // broker::Injector::apply), and the credential must be loadable; then the credential is
  // injected, which is what replaces its placeholder. `tls`: the request leaves over verified TLS;
  // over plain HTTP only a credential with allow_plaintext may be sent (else
  // credential_requires_tls). Sets the audit record's credential and injected, counts the
  // injection, and returns the refusal to send instead (the head is then left as it was).
  // Accept-Encoding becomes identity (scrubbing needs identity bodies) on every request of a task
  // whose responses are scrubbed, and on every one a secret went into; such a secret's forms are
  // kept to be scrubbed from this connection's responses (unless its credential says `scrub:
  // false`), and the head must be cleansed (cleanseRequestHead) once it has been sent.
  std::optional<Refusal> apply(boost::beast::http::request_header<>& req, std::string_view host,
                               bool tls, const policy::Decision& decision, RequestLog& log);

  // Makes a scrubber for a response when the task can reach any secret that is scrubbed
  // (every credential its policy names, TaskEntry::secrets, whatever this request carried, and
  // any secret sent on this connection), and scrubs the response's header fields with it at
  // once. Identity was asked for; a body that
  // comes in one layer of gzip or deflate anyway (a content coding, or a transfer coding
  // before chunked) gets a `decoder`; its Content-Encoding, Transfer-Encoding and
  // Content-Length fields are removed and a strong ETag made weak (the client gets the
  // identity body it asked for; frame it anew, with a length that may change). Any other
  // coding, or more than one over all field lines of both names (responseCodings), cannot be
  // read to scrub it: the response is refused (502 response_not_scrubbable, returned), never
  // relayed unscrubbed.
  // `hasBody`: a body follows the head (a HEAD response, a 204 or 304 keep their fields).
  std::optional<Refusal> scrubHeaders(boost::beast::http::fields& res, bool hasBody,
                                      const RequestLog& log,
                                      std::optional<broker::Scrubber>& scrubber,
                                      std::unique_ptr<broker::BodyDecoder>& decoder);
  // Counts the scrubber's replacements in the task's metrics.
  void countScrubs(const std::optional<broker::Scrubber>& scrubber) const;
  // The task's secrets and those sent here, compiled once for as long as neither changes (what
  // scrubHeaders scrubs with; the WebSocket relay scrubs frames with it).
  std::shared_ptr<const broker::ScrubSet> scrubSet();

 private:
  // Made on first need (null when no credentials are configured).
  broker::Injector* injector();
  // The placeholders this connection honours and scrubs back to (see ListenerInfo).
  std::shared_ptr<const broker::PlaceholderSet> placeholders() const;

  ClientConnection& c_;
  std::optional<broker::Injector> injector_;      // made on the connection's first need
  std::vector<broker::ScrubRule> injectedRules_;  // the secrets sent on this connection
  std::shared_ptr<const std::vector<broker::SecretForm>> taskForms_;  // scrubSet_ made from
  std::shared_ptr<const broker::ScrubSet> scrubSet_;
};

// A coding of a response body, as its header field named it.
struct ResponseCoding {
  std::string_view field;  // "Content-Encoding" or "Transfer-Encoding"
  std::string_view name;   // as sent (a view into the fields)
};

// The codings of a response body in the order they were applied, from every field line of
// Content-Encoding and then of Transfer-Encoding: identity content codings and the final
// chunked (the framing, which the parser has undone) left out. The one place that reads a
// response's codings: anything left here is a layer between the body's bytes and its content.
std::vector<ResponseCoding> responseCodings(const boost::beast::http::fields& res);

// Cleanses a request head (cleanseRequestHead) when it goes out of scope.
struct CleanseOnExit {
  boost::beast::http::request_header<>& head;
  ~CleanseOnExit();
};

}  // namespace sandgate::proxy
