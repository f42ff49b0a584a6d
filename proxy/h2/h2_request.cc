// One HTTP/2 stream's request and response heads (see h2_request.h).
//
// The head is rendered as the HTTP/1.1 head it stands for and goes through the validator and
// Beast's parser as an intercepted HTTP/1.1 request's does: one strict reading of a request for
// both protocols, so a request cannot mean one thing to the h2 checks and another to the policy.
// nghttp2 has already refused what HTTP/2 forbids (RFC 9113 §8.2: upper-case names,
// connection-specific fields, CR, LF and NUL in values, pseudo-fields missing, repeated or after
// a regular field), so nothing is rendered here that could split the line it is written on.
#include "proxy/h2/h2_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <cctype>

#include "common/http_text.h"
#include "policy/host.h"
#include "proxy/client/ask.h"
#include "proxy/client/http_validation.h"
#include "proxy/exchange/exchange.h"
#include "proxy/exchange/form_gate.h"
#include "proxy/exchange/headers.h"
#include "proxy/exchange/relay.h"

namespace sandgate::proxy {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return out;
}

const std::string* find(const H2Fields& fields, std::string_view name) {
  for (const auto& [n, v] : fields) {
    if (n == name) return &v;
  }
  return nullptr;
}

}  // namespace

H2Request::~H2Request() {
  if (applied_) cleanseRequestHead(parser_.get());
}

size_t H2Request::formLimit() const {
  return static_cast<size_t>(std::max<uint64_t>(c_.limits().maxHeaderBytes, 1024));
}

std::optional<Refusal> H2Request::judge(const H2Fields& fields, RequestLog& log) {
  auto& rec = log.record;
  const std::string* method = find(fields, ":method");
  const std::string* path = find(fields, ":path");
  const std::string* authority = find(fields, ":authority");
  const std::string* host = find(fields, "host");
  rec.method = method ? *method : std::string();
  Refusal r{.status = 400, .task = rec.task, .host = rec.host};
  // CONNECT (and extended CONNECT, which sandgate never enables) inside a tunnel would be a
  // tunnel the policy never saw.
  if (!method || *method == "CONNECT" || !path) {
    r.reason = reason::kBadTarget;
    r.detail = "CONNECT inside an intercepted tunnel is not relayed";
    r.hint = "send each host's requests through their own CONNECT";
    return r;
  }
  // The request names the tunnel's host, like an HTTP/1.1 request's Host field: :authority
  // (and a Host field, when both are sent, must say the same).
  const std::string* named = authority ? authority : host;
  const bool bound = named && (!authority || !host || *authority == *host) &&
                     policy::matchesTarget(*named, target_, port_, 443);
  if (!bound || path->empty() || (*path)[0] != '/') {
    r.status = 421;
    r.reason = reason::kMisdirectedRequest;
    r.detail = fmt::format(
        "a request inside the tunnel must name the CONNECT host '{}' (:authority) and a path",
        target_.name);
    r.hint = "send requests for another host through their own CONNECT";
    return r;
  }
  authority_ = *named;
  if (const std::string* te = find(fields, "te")) trailersAsked_ = *te == "trailers";
  if (const std::string* e = find(fields, "expect")) asksContinue_ = iequals(*e, "100-continue");
  // The HTTP/1.1 head this request stands for.
  std::string head = fmt::format("{} {} HTTP/1.1\r\nHost: {}\r\n", *method, *path, *named);
  for (const auto& [name, value] : fields) {
    if (name.empty() || name[0] == ':' || name == "host") continue;
    head += name;
    head += ": ";
    head += value;
    head += "\r\n";
  }
  head += "\r\n";
  const auto& limits = c_.limits();
  if (head.size() > limits.maxHeaderBytes) {
    r.status = 431;
    r.reason = reason::kHeaderTooLarge;
    r.detail = "request head over limits.max_header_bytes";
    return r;
  }
  RequestHead parsed;
  if (auto e = validateRequestHead(head, &parsed)) {
    r.reason = e->reason;
    r.detail = e->detail;
    return r;
  }
  beast::flat_buffer buffer;
  buffer.commit(asio::buffer_copy(buffer.prepare(head.size()), asio::buffer(head)));
  if (auto refusal = parseRequestHead(parser_, buffer, head.size(), limits, rec)) return refusal;
  method_ = *method;
  path_ = path->substr(0, path->find('?'));
  rec.path = path_;  // never the query: it may carry a key
  const policy::Request asked{target_, port_, std::string_view(method_), std::string_view(path_),
                              std::nullopt};
  auto& req = parser_.get();
  // on_unknown: ask holds HTTP/1.1 requests only: an h2 stream is refused, never let through.
  decision_ = refuseUnasked(decideHttpRequest(c_, asked, req), c_, asked);
  rec.rule = decision_.rule;
  if (!decision_.allowed()) {
    return policyRefusal(decision_, rec.task, rec.host,
                         "ask for a policy rule that allows this request");
  }
  // A Git gate reads a push's command list from the body before the upstream is dialled, on an
  // HTTP/1.1 exchange: a git: rule's host is never offered h2 (intercept.cc); a stream that
  // reaches one anyway is refused rather than let through ungated.
  if (decision_.git) {
    r.status = 421;
    r.reason = reason::kGitNeedsHttp1;
    r.rule = decision_.rule;
    r.detail = "requests under a git: rule are served over HTTP/1.1 only";
    r.hint = "connect again with HTTP/1.1 (git -c http.version=HTTP/1.1)";
    return r;
  }
  // Likewise an llm: rule: its calls are read, limited and accounted on HTTP/1.1 exchanges
  // (exchange/llm_gate.h), and its host is never offered h2; a stream that reaches one anyway
  // is refused rather than let through unaccounted.
  if (decision_.llm) {
    r.status = 421;
    r.reason = reason::kLlmNeedsHttp1;
    r.rule = decision_.rule;
    r.detail = "requests under an llm: rule are served over HTTP/1.1 only";
    r.hint = "connect again with HTTP/1.1";
    return r;
  }
  needsForm_ = isFormBody(req) && refusesOverrides(c_, asked);
  return std::nullopt;
}

std::optional<Refusal> H2Request::judgeFormBody(std::string_view body, bool complete,
                                                RequestLog& log) {
  auto& rec = log.record;
  std::string name;
  if (!complete) {
    name = fmt::format("?(a form body over {} bytes, unchecked)", formLimit());
  } else if (!findOverrideParameter(body, name)) {
    return std::nullopt;
  }
  policy::Request again{target_, port_, std::string_view(method_), std::string_view(path_),
                        std::nullopt};
  again.overrideHeader = name;
  decision_ = refuseUnasked(decideRequest(c_, again), c_, again);
  rec.rule = decision_.rule;
  if (decision_.allowed()) return std::nullopt;
  return policyRefusal(decision_, rec.task, rec.host,
                       "ask for a policy rule that allows this request");
}

std::optional<Refusal> H2Request::forUpstream(RequestLog& log, H2Fields& out,
                                              bool& expectContinue) {
  auto& req = parser_.get();
  expectContinue = prepareRequestHead(req);
  if (auto refusal = creds_.apply(req, target_.name, true, decision_, log)) return refusal;
  applied_ = true;
  out.clear();
  out.emplace_back(":method", method_);
  out.emplace_back(":scheme", "https");
  out.emplace_back(":authority", authority_);
  out.emplace_back(":path", std::string(req.target()));  // a credential may sit in the query
  for (const auto& f : req) {
    std::string name = lower(f.name_string());
    if (name == "host") continue;
    out.emplace_back(std::move(name), std::string(f.value()));
  }
  // The one value of te HTTP/2 allows, which gRPC needs the upstream to see.
  if (trailersAsked_) out.emplace_back("te", "trailers");
  auto& rec = log.record;
  rec.verdict = outcomeOf(decision_.verdict);
  rec.reason = decision_.reason;
  return std::nullopt;
}

std::optional<Refusal> h2ResponseHead(RequestCredentials& creds, int status, const H2Fields& fields,
                                      bool hasBody, bool grpc, const RequestLog& log,
                                      std::optional<broker::Scrubber>& scrubber,
                                      std::unique_ptr<broker::BodyDecoder>& decoder,
                                      H2Fields& out) {
  http::fields f;
  for (const auto& [name, value] : fields) {
    if (!name.empty() && name[0] != ':') f.insert(name, value);
  }
  stripHopByHop(f);
  if (auto refusal = creds.scrubHeaders(f, hasBody, log, scrubber, decoder)) return refusal;
  const auto& rec = log.record;
  if (grpc && scrubber && !scrubber->empty()) {
    // gRPC frames each message with its length, and protobuf each field: a replacement of
    // another length would corrupt them, and a compressed message hides what it carries.
    auto enc = f.find("grpc-encoding");
    const bool compressed = enc != f.end() && !iequals(enc->value(), "identity");
    // A replacement of another length is caught in the body itself (h2_stream.cc resets the
    // stream when one is made), so that responses that carry no secret pass.
    if (decoder || compressed) {
      return Refusal{.status = 502,
                     .reason = reason::kGrpcNotScrubbable,
                     .task = rec.task,
                     .host = rec.host,
                     .rule = rec.rule,
                     .detail = "a compressed gRPC response cannot be scrubbed",
                     .outcome = Outcome::kError};
    }
  }
  const bool lengthMayChange = decoder || (scrubber && !scrubber->preservesLength());
  out.clear();
  out.emplace_back(":status", std::to_string(status));
  for (const auto& h : f) {
    std::string name = lower(h.name_string());
    if (lengthMayChange && name == "content-length") continue;
    out.emplace_back(std::move(name), std::string(h.value()));
  }
  return std::nullopt;
}

void h2ScrubTrailers(std::optional<broker::Scrubber>& scrubber, H2Fields& trailers) {
  std::erase_if(trailers, [](const auto& f) {
    return f.first.empty() || f.first[0] == ':' || f.first.starts_with("x-sandgate-");
  });
  if (scrubber) scrubber->scrubHeaders(trailers);
}

}  // namespace sandgate::proxy
