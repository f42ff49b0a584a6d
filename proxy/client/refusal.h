// Refusals a program can read: status, X-Sandgate-Reason and a small JSON body.
#pragma once

#include <string>
#include <string_view>

namespace sandgate::proxy {

// Reason tokens of the proxy itself (policy tokens live in policy/engine.h, parsing tokens
// in proxy/http_validation.h). Stable: responses, audit lines, metric labels and tests use them.
namespace reason {
inline constexpr std::string_view kAuthRequired = "auth_required";                 // 407
inline constexpr std::string_view kAuthInvalid = "auth_invalid";                   // 407
inline constexpr std::string_view kTaskMismatch = "task_mismatch";                 // 407
// 403: the connection's task token (its `hosts` claim) does not name the request's host.
inline constexpr std::string_view kDeniedByToken = "denied_by_token";
inline constexpr std::string_view kConnectionLimit = "connection_limit";           // 429
inline constexpr std::string_view kTunnelLimit = "tunnel_limit";                   // 429
inline constexpr std::string_view kRateLimited = "rate_limited";                   // 429
inline constexpr std::string_view kDnsFailed = "dns_failed";                       // 502
inline constexpr std::string_view kUpstreamRefused = "upstream_refused";           // 502
inline constexpr std::string_view kUpstreamReset = "upstream_reset";               // 502
inline constexpr std::string_view kUpstreamUnreachable = "upstream_unreachable";   // 502
inline constexpr std::string_view kUpstreamBadResponse = "upstream_bad_response";  // 502
inline constexpr std::string_view kUpstreamTlsFailed = "upstream_tls_failed";      // 502
// 502: a response to a request that carried a secret came in a coding (Content-Encoding or
// Transfer-Encoding) sandgate cannot undo, so its body could not be scrubbed.
inline constexpr std::string_view kResponseNotScrubbable = "response_not_scrubbable";
inline constexpr std::string_view kUpstreamTimeout = "upstream_timeout";  // 504
inline constexpr std::string_view kProxyLoop = "proxy_loop";  // 403: a target is sandgate itself
inline constexpr std::string_view kInterceptionUnavailable = "interception_unavailable";  // 502
// 400: an intercepted request asked to switch to a protocol other than websocket.
inline constexpr std::string_view kUpgradeNotSupported = "upgrade_not_supported";
// Tunnel ends (audit only: the 200 has already been sent).
inline constexpr std::string_view kSniMismatch = "sni_mismatch";
inline constexpr std::string_view kNotTls = "not_tls";
inline constexpr std::string_view kBadClientHello = "bad_client_hello";
inline constexpr std::string_view kIdleTimeout = "idle_timeout";
inline constexpr std::string_view kClientTimeout = "client_timeout";
}  // namespace reason

struct Refusal {
  int status = 403;
  std::string_view reason;
  std::string task;
  std::string host;
  std::string rule;    // "file:line" of the deciding rule, when one decided
  std::string detail;  // one human sentence (the JSON "error" field)
  std::string hint;    // what to change, when we can tell
};

// The complete HTTP/1.1 response for `r`, always with "Connection: close" (a refused
// connection is never reused: what follows the refused head is not read). A 407 carries
// Proxy-Authenticate: Basic realm="sandgate".
std::string renderRefusal(const Refusal& r);

// How reading an upstream's response head failed, as the forward and intercept paths see it.
struct UpstreamResponseFailure {
  bool timedOut = false;  // no head within the deadline
  bool closed = false;    // the upstream closed or reset the connection
  std::string error;      // the read error's message; empty when the head was an unasked 101
};

// The answer for such a failure: 504 upstream_timeout, 502 upstream_reset, or 502
// upstream_bad_response, with a sentence naming `upstream`.
Refusal upstreamResponseRefusal(const UpstreamResponseFailure& f, std::string task,
                                std::string host, std::string rule, std::string_view upstream);

// The standard reason phrase of the statuses sandgate sends itself.
std::string_view statusText(int status);

}  // namespace sandgate::proxy
