// Rendering of refusals (see refusal.h).
#include "proxy/client/refusal.h"

#include <fmt/format.h>

#include <boost/json.hpp>
#include <span>

#include "proxy/client/decision_reasons.h"
#include "proxy/client/refusal_hints.h"

namespace sandgate::proxy {

std::string_view statusText(int status) {
  switch (status) {
    case 200:
      return "Connection established";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 405:
      return "Method Not Allowed";
    case 407:
      return "Proxy Authentication Required";
    case 429:
      return "Too Many Requests";
    case 421:
      return "Misdirected Request";
    case 431:
      return "Request Header Fields Too Large";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Error";
  }
}

int reasonStatus(std::string_view token) {
  for (const auto& catalogue : {std::span<const ReasonInfo>(kRequestReasons),
                                std::span<const ReasonInfo>(kDecisionReasons)}) {
    for (const auto& info : catalogue) {
      if (info.token == token) return info.status;
    }
  }
  return -1;
}

std::string refusalJson(const Refusal& r) {
  boost::json::object body;
  body["error"] = r.detail.empty() ? std::string(statusText(r.status)) : r.detail;
  body["reason"] = r.reason;
  body["task"] = r.task;
  body["host"] = r.host;
  body["rule"] = r.rule;
  // A hint for every reason: the caller's, more precise, or the catalogue's.
  body["hint"] = r.hint.empty() ? std::string(hintFor(r.reason)) : r.hint;
  if (!r.requestId.empty()) body["request_id"] = r.requestId;
  if (r.budget) {
    body["budget"] = {{"name", r.budget->name},
                      {"window", r.budget->window},
                      {"metric", r.budget->metric},
                      {"used", r.budget->used},
                      {"limit", r.budget->limit}};
  }
  std::string json = r.body.empty() ? boost::json::serialize(body) : r.body;
  json += '\n';
  return json;
}

namespace {

constexpr int64_t kRetryWorthWaitingSeconds = 60;

// Whether a client should retry `r`; else the response says X-Should-Retry: false.
bool worthRetrying(const Refusal& r) {
  // The OpenAI and Anthropic SDKs retry a 429 after its Retry-After however long it is: a day
  // budget's refusal would hold an agent's call for hours instead of raising sandgate's message.
  // They obey X-Should-Retry: a budget that refills within a minute is worth the wait, one that
  // refills later (or never: a run budget) is not.
  return r.reason != reason::kBudgetExceeded ||
         (r.retryAfter > 0 && r.retryAfter <= kRetryWorthWaitingSeconds);
}

}  // namespace

std::string renderRefusal(const Refusal& r) {
  const std::string json = refusalJson(r);
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nX-Sandgate-Reason: {}\r\n"
      "Content-Length: {}\r\nConnection: close\r\n",
      r.status, statusText(r.status), r.reason, json.size());
  // Made by sandgate from hex digits and a count: nothing a client sent.
  if (!r.requestId.empty()) out += fmt::format("X-Request-Id: {}\r\n", r.requestId);
  if (r.status == 407) out += "Proxy-Authenticate: Basic realm=\"sandgate\"\r\n";
  if (r.retryAfter > 0) out += fmt::format("Retry-After: {}\r\n", r.retryAfter);
  if (!worthRetrying(r)) out += "X-Should-Retry: false\r\n";
  out += "\r\n";
  out += json;
  return out;
}

Refusal upstreamResponseRefusal(const UpstreamResponseFailure& f, std::string task,
                                std::string host, std::string rule, std::string_view upstream) {
  Refusal r{.status = 502,
            .reason = reason::kUpstreamBadResponse,
            .task = std::move(task),
            .host = std::move(host),
            .rule = std::move(rule),
            .outcome = Outcome::kError};
  if (f.timedOut) {
    r.status = 504;
    r.reason = reason::kUpstreamTimeout;
    r.detail = fmt::format("{} sent no response in time", upstream);
  } else if (f.closed) {
    r.reason = reason::kUpstreamReset;
    r.detail = fmt::format("{} closed the connection: {}", upstream, f.error);
  } else if (!f.error.empty()) {
    r.detail = fmt::format("{} sent an invalid response: {}", upstream, f.error);
  } else {
    r.detail = "the upstream switched protocols without being asked to";
  }
  return r;
}

}  // namespace sandgate::proxy
