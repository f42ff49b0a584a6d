// The `git:` rules on an SSH exec command and a push's command list (see git_decision.h).
#include "proxy/ssh/git_decision.h"

#include <fmt/format.h>

#include "policy/engine.h"

namespace sandgate::proxy::ssh {

GitVerdict decideGitCommand(const policy::GitRules* rules, const GitCommand& cmd) {
  if (cmd.service == GitService::kUploadArchive && (!rules || !rules->archive())) {
    // git-upload-archive runs `git archive` on the forge with the client's arguments: a read
    // path of its own, so it is served only where a rule says so.
    return GitVerdict{false, policy::reason::kGitArchiveNotAllowed,
                      rules ? "git-upload-archive needs git.archive: true in the rule"
                            : "git-upload-archive needs a git block with archive: true"};
  }
  if (!rules) return GitVerdict{};
  policy::GitRequest req{cmd.service == GitService::kReceivePack ? policy::GitService::kReceivePack
                         : cmd.service == GitService::kUploadArchive
                             ? policy::GitService::kArchive
                             : policy::GitService::kUploadPack,
                         cmd.repository, false};
  auto v = rules->decideRequest(req);
  return GitVerdict{v.allowed, v.reason, v.detail};
}

PushVerdict decideGitPush(const policy::GitRules* rules, const policy::PushCommands& push) {
  PushVerdict v;
  if (!rules) return v;
  auto d = policy::decidePush(*rules, push);
  v.refused = d.refused;
  v.reason = d.reason;
  v.detail = d.detail;
  for (const auto& cv : d.commands) {
    v.verdicts.push_back(cv.allowed ? std::string(policy::reason::kAllowed)
                                    : std::string(cv.reason));
    v.why.push_back(cv.allowed ? fmt::format("push refused as a whole ({})", d.reason)
                               : fmt::format("{} ({})", cv.reason, cv.detail));
  }
  return v;
}

}  // namespace sandgate::proxy::ssh
