// The JSON of the question ops (see admin_questions.h).
#include "proxy/admin/admin_questions.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <vector>

namespace sandgate::proxy {

namespace json = boost::json;

namespace {

// Fields are bounded by what serve accepted (a request head), and printed by `approve list`:
// cut here too, so that a hostile peer's reply cannot flood a terminal.
constexpr size_t kMaxFieldBytes = 2048;
constexpr size_t kMaxQuestions = 4096;

std::string field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v || !v->is_string()) return {};
  std::string_view s = v->as_string();
  return std::string(s.substr(0, kMaxFieldBytes));
}

uint64_t number(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v && v->is_uint64()) return v->as_uint64();
  if (v && v->is_int64() && v->as_int64() >= 0) return static_cast<uint64_t>(v->as_int64());
  return 0;
}

}  // namespace

json::array questionsToJson(const std::vector<QuestionInfo>& questions) {
  json::array out;
  for (const auto& q : questions) {
    out.push_back({{"id", q.id},
                   {"task", q.key.task},
                   {"method", q.key.method},
                   {"host", q.key.host},
                   {"port", q.key.port},
                   {"path", q.key.path},
                   {"reason", q.reason},
                   {"asked", fmt::format("{:%Y-%m-%dT%H:%M:%SZ}",
                                         std::chrono::floor<std::chrono::seconds>(q.asked))},
                   {"waiting", q.waiting}});
  }
  return out;
}

std::vector<QuestionInfo> questionsFromJson(const json::array& a) {
  std::vector<QuestionInfo> out;
  for (const auto& v : a) {
    if (!v.is_object() || out.size() >= kMaxQuestions) continue;
    const auto& o = v.as_object();
    QuestionInfo q;
    q.id = number(o, "id");
    q.key.task = field(o, "task");
    q.key.method = field(o, "method");
    q.key.host = field(o, "host");
    q.key.port = static_cast<uint16_t>(std::min<uint64_t>(number(o, "port"), 65535));
    q.key.path = field(o, "path");
    q.reason = field(o, "reason");
    q.waiting = number(o, "waiting");
    out.push_back(std::move(q));
  }
  return out;
}

std::optional<AnswerKind> parseAnswerKind(std::string_view s) {
  if (s == "once") return AnswerKind::kAllowOnce;
  if (s == "run") return AnswerKind::kAllowRun;
  if (s == "always") return AnswerKind::kAllowAlways;
  if (s == "deny") return AnswerKind::kDeny;
  return std::nullopt;
}

AdminReply serveQuestions(const AdminBackend& backend, const PeerCredentials& peer,
                          const AdminRequest& req, const std::string& socketPath) {
  if (!backend.questions || !backend.answer) {
    return errorReply(admin_reason::kBadRequest, "this server holds no questions");
  }
  auto mayAnswer = [&](const std::string& task) {
    if (!backend.taskGroups) return true;
    auto allowed = backend.taskGroups(task);
    return !allowed || !checkTaskPeer(peer, task, *allowed);
  };
  std::vector<QuestionInfo> mine;
  for (auto& q : backend.questions()) {
    if (mayAnswer(q.key.task)) mine.push_back(std::move(q));
  }
  AdminReply r;
  r.ok = true;
  if (req.op == AdminOp::kQuestions) {
    r.questions = std::move(mine);
    return r;
  }
  auto it = std::find_if(mine.begin(), mine.end(),
                         [&](const QuestionInfo& q) { return q.id == req.questionId; });
  if (it == mine.end()) {
    return errorReply(admin_reason::kUnknownQuestion,
                      fmt::format("no question {} is waiting for you (answered already, timed "
                                  "out, or of a task you may not answer for)",
                                  req.questionId));
  }
  const Decider who{peer.uid, userName(peer.uid)};
  auto answered = backend.answer(req.questionId, *parseAnswerKind(req.answer), who);
  if (!answered) return errorReply(answered.error());
  spdlog::info("admin socket {}: question {} ({} {} {}:{}{}) answered {} by {} (uid {}, pid {})",
               socketPath, answered->id, answered->key.task, answered->key.method,
               answered->key.host, answered->key.port, answered->key.path, req.answer, who.user,
               who.uid, peer.pid);
  r.questions = std::vector<QuestionInfo>{answered.value()};
  return r;
}

std::string userName(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found) {
    return found->pw_name;
  }
  return std::to_string(uid);
}

}  // namespace sandgate::proxy
