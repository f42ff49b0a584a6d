// What one HTTP/2 stream gets that an intercepted HTTP/1.1 request gets: its head judged by the
// same validator (rendered as the HTTP/1.1 head it stands for), :authority and Host bound to the
// CONNECT target, the policy on method and path, the form gate, the header rewrite and the
// credential; and on the way back, the response's fields and trailers scrubbed. Internal to
// proxy/h2 (h2_proxy.cc drives the frames).
#pragma once

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "broker/body_decoder.h"
#include "broker/scrubber.h"
#include "policy/engine.h"
#include "proxy/client/client_connection.h"
#include "proxy/exchange/request_credentials.h"

namespace sandgate::proxy {

// Header fields as nghttp2 hands them over: names in lower case, pseudo-fields (":path") first.
using H2Fields = std::vector<std::pair<std::string, std::string>>;

class H2Request {
 public:
  H2Request(ClientConnection& c, RequestCredentials& creds, const policy::Target& target,
            uint16_t port)
      : c_(c), creds_(creds), target_(target), port_(port) {}
  ~H2Request();
  H2Request(const H2Request&) = delete;
  H2Request& operator=(const H2Request&) = delete;

  // Judges the request head `fields` (nghttp2 has checked its form: pseudo-fields, names,
  // connection-specific fields, te). The refusal to answer the stream with, or nullopt when
  // the request may go on. Fills the audit record's method, path and rule.
  std::optional<Refusal> judge(const H2Fields& fields, RequestLog& log);
  // The request's body must be read before it goes upstream (a form on a host whose rules
  // restrict methods, paths or git: form_gate.h), up to formLimit() bytes.
  bool needsFormBody() const { return needsForm_; }
  // The client sent `expect: 100-continue` (and waits for the 100 before its body).
  bool asksContinue() const { return asksContinue_; }
  size_t formLimit() const;
  // Judges that body (`complete`: it ended within the limit).
  std::optional<Refusal> judgeFormBody(std::string_view body, bool complete, RequestLog& log);
  // The header rewrite and the credential: the fields to send upstream (pseudo-fields first),
  // or the refusal. `expectContinue` says whether the client asked for 100-continue.
  std::optional<Refusal> forUpstream(RequestLog& log, H2Fields& out, bool& expectContinue);

 private:
  ClientConnection& c_;
  RequestCredentials& creds_;
  const policy::Target& target_;
  uint16_t port_;
  boost::beast::http::request_parser<boost::beast::http::buffer_body> parser_;
  policy::Decision decision_;
  std::string method_;
  std::string path_;  // without the query
  std::string authority_;
  bool trailersAsked_ = false;  // te: trailers (gRPC)
  bool needsForm_ = false;
  bool asksContinue_ = false;
  bool applied_ = false;  // the head may carry a credential: cleansed when done
};

// The response head from the upstream (`fields` without :status), made what the client may see:
// hop-by-hop and X-Sandgate-* fields removed, secrets scrubbed (RequestCredentials::scrubHeaders
// makes the scrubber and the decoder the body needs), names in lower case, :status first, no
// Content-Length when the body's length may change. The refusal when the body cannot be
// scrubbed. `grpc`: the body is gRPC's length-prefixed messages; a compressed one (a coding, or
// grpc-encoding other than identity) of a task with secrets to scrub is refused
// (grpc_not_scrubbable): a secret inside it could not be found.
std::optional<Refusal> h2ResponseHead(RequestCredentials& creds, int status, const H2Fields& fields,
                                      bool hasBody, bool grpc, const RequestLog& log,
                                      std::optional<broker::Scrubber>& scrubber,
                                      std::unique_ptr<broker::BodyDecoder>& decoder, H2Fields& out);

// Trailer fields from the upstream, made what the client may see: pseudo and X-Sandgate-*
// fields dropped, the rest scrubbed by the response's scrubber (when it has one).
void h2ScrubTrailers(std::optional<broker::Scrubber>& scrubber, H2Fields& trailers);

}  // namespace sandgate::proxy
