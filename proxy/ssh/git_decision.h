// The `git:` rules applied to what an SSH client asks (issue #42): one exec command (its
// repository, fetch, archive) and a push's command list, with the HTTP gate's reason tokens.
// Shared by the broker (ssh_broker.cc) and its test harness, so the two cannot drift. Pure.
#pragma once

#include "policy/git_rules.h"
#include "proxy/ssh/git_command.h"
#include "proxy/ssh/ssh_session.h"

namespace sandgate::proxy::ssh {

// `rules` null: the admitting rule has no `git:` block, which admits any repository for fetch
// and push (the exec gate still serves only git's commands) but never an archive, which needs
// `git.archive: true`. An archive is a fetch too: it also needs the repository and git.fetch.
GitVerdict decideGitCommand(const policy::GitRules* rules, const GitCommand& cmd);

// Each command of a push; one refused refuses the push as a whole (its `ng` lines say why).
PushVerdict decideGitPush(const policy::GitRules* rules, const policy::PushCommands& push);

}  // namespace sandgate::proxy::ssh
