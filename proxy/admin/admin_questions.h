// The admin socket's ops for on_unknown: ask (`sandgate approve`): their JSON, apart from the
// run launcher's ops in admin_protocol.cc.
//
//   {"v":1,"op":"questions"}                       → {"v":1,"ok":true,"questions":[Q…]}
//   {"v":1,"op":"answer","id":N,"answer":"once"}   → {"v":1,"ok":true,"questions":[Q]}
//       ("answer": once, run, always or deny; the reply names the question answered)
//   Q = {"id":N,"task":"T","method":"GET","host":"h","port":443,"path":"/p",
//        "reason":"no_matching_rule","asked":"2026-12-05T07:00:00Z","waiting":1}
// Refusals: unknown_question (no such question waits), permission_denied (the peer check, and
// a task's admin_groups for its questions).
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "proxy/admin/admin_socket.h"
#include "proxy/state/questions.h"

namespace sandgate::proxy {

namespace admin_reason {
inline constexpr std::string_view kUnknownQuestion = "unknown_question";
}  // namespace admin_reason

boost::json::array questionsToJson(const std::vector<QuestionInfo>& questions);
std::vector<QuestionInfo> questionsFromJson(const boost::json::array& a);

// "once", "run", "always", "deny" → the answer; nullopt for anything else.
std::optional<AnswerKind> parseAnswerKind(std::string_view s);

// The reply to a questions or answer op from `peer` (who passed the socket's peer check): only
// the questions of tasks whose admin_groups the peer holds (root: all) are listed or answered.
AdminReply serveQuestions(const AdminBackend& backend, const PeerCredentials& peer,
                          const AdminRequest& req, const std::string& socketPath);

// The user name of `uid` (getpwuid_r), or the uid in decimal when it has none.
std::string userName(uid_t uid);

}  // namespace sandgate::proxy
