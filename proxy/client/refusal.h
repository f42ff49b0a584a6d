// Refusals a program can read: status, X-Sandgate-Reason and a small JSON body.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "proxy/client/reasons.h"
#include "proxy/observe/audit.h"
#include "proxy/observe/outcome.h"

namespace sandgate::proxy {

struct Refusal {
  // Every member has a default, so that a refusal names only what it has:
  // Refusal{.status = 429, .reason = reason::kTunnelLimit, .detail = "..."}.
  int status = 403;
  std::string_view reason{};
  std::string task{};
  std::string host{};
  std::string rule{};       // "file:line" of the deciding rule, when one decided
  std::string detail{};     // one human sentence (the JSON "error" field)
  std::string hint{};       // what to change, when we can tell
  std::string requestId{};  // the audit line's request_id: X-Request-Id and "request_id"
  // kDeny: the request was refused; kError: something it needed failed (an upstream, a
  // credential, TLS).
  Outcome outcome = Outcome::kDeny;
  // Retry-After in seconds (a budget whose window refills); 0: none.
  int64_t retryAfter = 0;
  // The budget that refused (budget_exceeded, budget_unavailable): the body's "budget" object
  // and the audit line's.
  std::optional<BudgetAudit> budget{};
  // A body of the refused API's own (an LLM provider's error shape, so its SDKs print the
  // message), sent as application/json instead of sandgate's; empty: sandgate's.
  std::string body{};
};

// The complete HTTP/1.1 response for `r`, always with "Connection: close" (a refused
// connection is never reused: what follows the refused head is not read). A 407 carries
// Proxy-Authenticate: Basic realm="sandgate".
std::string renderRefusal(const Refusal& r);
// The JSON body of that response, alone (an HTTP/2 refusal carries it in its DATA).
std::string refusalJson(const Refusal& r);

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
