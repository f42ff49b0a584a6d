// Git requests under a rule's `git:` block, before the upstream (see git_gate.h).
#include "proxy/exchange/git_gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <vector>

#include "common/http_text.h"
#include "policy/git_protocol.h"
#include "policy/git_rules.h"
#include "proxy/client/reasons.h"
#include "proxy/exchange/body_peek.h"
#include "proxy/observe/metrics.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

std::string_view view(const beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.data().size()};
}

std::string_view serviceName(policy::GitService s) {
  switch (s) {
    case policy::GitService::kUploadPackAdvertisement:
      return "upload-pack-refs";
    case policy::GitService::kReceivePackAdvertisement:
      return "receive-pack-refs";
    case policy::GitService::kUploadPack:
      return "upload-pack";
    case policy::GitService::kReceivePack:
      return "receive-pack";
    case policy::GitService::kDumb:
      return "dumb";
    case policy::GitService::kArchive:
      return "archive";
  }
  return {};
}

Refusal gitRefusal(int status, std::string_view reason, const AuditRecord& rec,
                   const policy::Decision& d, std::string detail, std::string hint) {
  return Refusal{.status = status,
                 .reason = reason,
                 .task = rec.task,
                 .host = rec.host,
                 .rule = d.rule,
                 .detail = std::move(detail),
                 .hint = std::move(hint)};
}

// Reads the rest of the body that `peek` decodes and discards it, at most kGitDrainLimit
// bytes: the client, still sending, then reads the answer rather than a reset.
asio::awaitable<void> drainBody(BodyPeek& peek, beast::flat_buffer& in,
                                const GitReadSome& readSome) {
  uint64_t drained = 0;
  while (!peek.done() && drained < kGitDrainLimit) {
    const size_t fed = peek.fed();
    in.consume(fed);
    peek.consumed(fed);
    drained += fed;
    peek.rewind();
    if (fed == 0 || in.size() == 0) {
      auto [ec, n] = co_await readSome(in.prepare(16 * 1024));
      in.commit(n);
      if (ec) break;
    }
    if (!peek.feed(view(in))) break;
  }
  in.consume(in.size());
}

}  // namespace

asio::awaitable<GitGateResult> gateGitRequest(ClientConnection& c, const policy::Decision& decision,
                                              std::string_view path, std::string_view query,
                                              http::request_parser<http::buffer_body>& parser,
                                              beast::flat_buffer& in, RequestLog& log,
                                              const GitReadSome& readSome, const GitWrite& write) {
  GitGateResult out;
  if (decision.git == nullptr) co_return out;
  auto& req = parser.get();
  auto git = policy::classifyGitRequest(req.method_string(), path, query);
  if (!git) co_return out;
  auto& rec = log.record;
  rec.git.emplace();
  rec.git->repository = git->repository;
  rec.git->service = std::string(serviceName(git->service));
  const policy::GitRules& rules = *decision.git;
  if (auto v = rules.decideRequest(*git); !v.allowed) {
    out.action = GitGateResult::Action::kRefuse;
    out.refusal = gitRefusal(403, v.reason, rec, decision, v.detail,
                             v.reason == policy::reason::kGitFetchNotAllowed
                                 ? "ask for git.fetch: true in the rule"
                                 : "ask for the repository in the rule's git.repositories");
    co_return out;
  }
  if (!git->isPush()) co_return out;

  const auto& limits = c.limits();
  const size_t limit = static_cast<size_t>(std::max<uint64_t>(limits.maxHeaderBytes, 1024));
  // The wire bytes may carry chunk framing around tiny chunks: twice the decoded limit (and a
  // little) is all that is ever buffered before a decision.
  const size_t rawLimit = 2 * limit + 4096;
  // Every Content-Encoding field line and every element of each, as a server reads them (RFC
  // 9110, section 5.3), as responses are judged (responseCodings): "identity" first and "gzip"
  // in a second field is a gzip body, whose commands would not be read here.
  std::string coded;
  for (const auto& f : req) {
    if (f.name() != http::field::content_encoding) continue;
    forEachListElement(f.value(), [&](std::string_view c) {
      if (coded.empty() && !beast::iequals(c, "identity")) coded = std::string(c.substr(0, 32));
    });
  }
  if (!coded.empty()) {
    // git never compresses a push; a coded body is one whose commands are not read here.
    out.action = GitGateResult::Action::kRefuse;
    out.refusal = gitRefusal(
        400, policy::reason::kGitProtocolError, rec, decision,
        fmt::format("git-receive-pack request refused unchecked: its body has Content-Encoding "
                    "{}",
                    coded),
        "push without Content-Encoding");
    co_return out;
  }
  if (auto e = req.find(http::field::expect);
      e != req.end() && beast::iequals(e->value(), "100-continue")) {
    // The client waits for this before it sends the body that is to be judged.
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    auto [ec, n] = co_await write(asio::buffer(kContinue.data(), kContinue.size()));
    if (ec) {
      rec.verdict = Outcome::kError;
      rec.reason = reason::kClientClosed;
      rec.error = ec.message();
      out.action = GitGateResult::Action::kAnswered;
      co_return out;
    }
    out.sentContinue = true;
  }
  BodyPeek peek(parser, limit);
  policy::PushCommands push;
  auto protocolError = [&](std::string why) {
    push = policy::PushCommands{};
    push.status = policy::PushCommands::Status::kProtocolError;
    push.error = std::move(why);
  };
  bool framingBroken = false;
  while (true) {
    const std::string_view wire = view(in);
    if (!peek.feed(wire)) {
      protocolError("the request body's chunked framing is malformed");
      framingBroken = true;
      break;
    }
    push = policy::parsePushCommands(peek.decoded(), limit);
    if (push.status != policy::PushCommands::Status::kNeedMore) break;
    if (peek.done()) {
      protocolError("the request body ends before its command list does");
      break;
    }
    if (wire.size() >= rawLimit) {
      protocolError(fmt::format("the command list does not end within {} bytes", rawLimit));
      break;
    }
    const size_t room = std::min<size_t>(16 * 1024, rawLimit - wire.size());
    auto [ec, n] = co_await readSome(in.prepare(room));
    in.commit(n);
    if (ec) {
      rec.verdict = Outcome::kError;
      rec.reason = ec == beast::error::timeout ? reason::kClientTimeout : reason::kClientClosed;
      rec.error = fmt::format("client: {} while reading the push's command list", ec.message());
      out.action = GitGateResult::Action::kAnswered;
      co_return out;
    }
  }
  if (push.status == policy::PushCommands::Status::kProtocolError) {
    if (!framingBroken) co_await drainBody(peek, in, readSome);
    out.action = GitGateResult::Action::kRefuse;
    out.refusal = gitRefusal(400, policy::reason::kGitProtocolError, rec, decision,
                             "git-receive-pack request refused unchecked: " + push.error,
                             "push with a git client that speaks the v0/v1 push protocol");
    co_return out;
  }

  const policy::PushDecision verdict = policy::decidePush(rules, push);
  for (size_t i = 0; i < push.commands.size(); ++i) {
    const auto& cmd = push.commands[i];
    rec.git->refs.push_back(
        GitRefAudit{cmd.ref, cmd.oldId, cmd.newId,
                    std::string(verdict.commands[i].allowed ? policy::reason::kAllowed
                                                            : verdict.commands[i].reason)});
  }
  if (c.metrics) {
    // The refs that went through, or those that refused the push (the admitted refs of a
    // refused push did not happen and are not counted).
    if (!verdict.refused) {
      if (!push.commands.empty())
        c.metrics->gitPushRefs(policy::reason::kAllowed, push.commands.size());
    } else {
      for (const auto& v : verdict.commands) {
        if (!v.allowed) c.metrics->gitPushRefs(v.reason, 1);
      }
    }
  }
  if (!verdict.refused) co_return out;

  // Refused as a whole, before a byte reaches the upstream: each ref gets its own reason, the
  // admitted ones say why they fail with the rest.
  std::vector<std::string> why;
  for (size_t i = 0; i < push.commands.size(); ++i) {
    const auto& v = verdict.commands[i];
    why.push_back(v.allowed ? fmt::format("push refused as a whole ({})", verdict.reason)
                            : fmt::format("{} ({})", v.reason, v.detail));
  }
  const std::string body = policy::receivePackRefusal(
      push, why, fmt::format("push to {} refused: {}", git->repository, verdict.detail));
  // The client is still sending its pack: read it to the end (discarding it) so that it reads
  // the answer rather than a reset; a body past kGitDrainLimit is cut off by the close.
  co_await drainBody(peek, in, readSome);
  const std::string response = fmt::format(
      "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-receive-pack-result\r\n"
      "Cache-Control: no-cache\r\nX-Sandgate-Reason: {}\r\nContent-Length: {}\r\n"
      "Connection: close\r\n\r\n{}",
      verdict.reason, body.size(), body);
  rec.verdict = Outcome::kDeny;
  rec.reason = std::string(verdict.reason);
  rec.status = 200;
  rec.rule = decision.rule;
  auto [ec, n] = co_await write(asio::buffer(response.data(), response.size()));
  if (ec) rec.error = fmt::format("client: {}", ec.message());
  out.action = GitGateResult::Action::kAnswered;
  co_return out;
}

}  // namespace sandgate::proxy
