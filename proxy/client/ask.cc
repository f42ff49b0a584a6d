// Holding a request while an operator answers (see ask.h).
#include "proxy/client/ask.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "proxy/client/reasons.h"

namespace sandgate::proxy {

namespace asio = boost::asio;

namespace {

policy::Decision refused(policy::Decision d, std::string_view why, std::string detail) {
  d.verdict = policy::Verdict::kDeny;
  d.reason = why;
  d.askable = false;
  d.detail = std::move(detail);
  return d;
}

}  // namespace

asio::awaitable<policy::Decision> askOperator(ClientConnection& c, const policy::Request& req,
                                              policy::Decision d, RequestLog& log) {
  if (!d.askable || !c.task || !c.task->ask) co_return d;
  // A request inside a tunnel an operator approved (intercepted only so that deny rules with
  // methods or paths judge it): the tunnel's approval covers it.
  if (c.tunnelApproval) {
    log.record.approval = *c.tunnelApproval;
    co_return policy::approve(std::move(d), req);
  }
  const config::Ask& ask = *c.task->ask;
  QuestionKey key{c.task->name, std::string(req.method.value_or("CONNECT")), req.target.name,
                  req.port, std::string(req.path.value_or(""))};
  const std::string why(d.reason);
  // Named before co_await: GCC 12 destroyed by-value arguments of a co_await full-expression
  // twice (see client/outcome.cc's refuse()).
  auto asking = c.state.questions.ask(
      key, why, ask.maxPending, std::chrono::duration_cast<std::chrono::milliseconds>(ask.timeout));
  AskOutcome out = co_await std::move(asking);
  ApprovalAudit a;
  a.id = out.id;
  if (out.decider) {
    a.byUid = out.decider->uid;
    a.byUser = out.decider->user;
  }
  switch (out.kind) {
    case AskOutcome::Kind::kApproved:
      a.answer = out.remembered ? "remembered" : std::string(answerName(*out.answer));
      log.record.approval = a;
      co_return policy::approve(std::move(d), req);
    case AskOutcome::Kind::kDenied: {
      a.answer = "deny";
      log.record.approval = a;
      std::string detail =
          fmt::format("would be refused: {}; an operator ({}) denied it", d.detail, a.byUser);
      co_return refused(std::move(d), reason::kApprovalDenied, std::move(detail));
    }
    case AskOutcome::Kind::kQueueFull: {
      a.answer = "queue_full";
      log.record.approval = a;
      std::string detail = fmt::format(
          "would be refused: {}; the task has {} questions waiting (ask.max_pending) or this "
          "one has its maximum of requests",
          d.detail, ask.maxPending);
      co_return refused(std::move(d), reason::kApprovalQueueFull, std::move(detail));
    }
    case AskOutcome::Kind::kTimeout:
      break;
  }
  a.answer = "timeout";
  log.record.approval = a;
  std::string detail =
      fmt::format("would be refused: {}; no operator answered question {} within {}s", d.detail,
                  out.id, ask.timeout.count());
  co_return refused(std::move(d), reason::kApprovalTimeout, std::move(detail));
}

policy::Decision refuseUnasked(policy::Decision d, const ClientConnection& c,
                               const policy::Request& req) {
  if (!d.askable || !c.task || !c.task->ask) return d;
  if (c.tunnelApproval) return policy::approve(std::move(d), req);
  std::string detail = fmt::format(
      "would be refused: {}; an HTTP/2 request is not held for an operator's answer", d.detail);
  return refused(std::move(d), reason::kApprovalNeedsHttp1, std::move(detail));
}

}  // namespace sandgate::proxy
