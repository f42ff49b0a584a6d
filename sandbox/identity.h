// Which host uid/gid the sandbox runs as, and the user-namespace maps that say so.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/result.h"
#include "sandbox/launcher.h"

namespace sandgate::sandbox {

struct Identity {
  uid_t uid = 65534;
  gid_t gid = 65534;
  bool rootless = false;  // the launcher is not root: only its own ids can be mapped
};

inline constexpr uid_t kNobody = 65534;

// Applies the rules documented on Options (never uid 0). `workspace` must exist.
Result<Identity> chooseIdentity(const Options& options, const std::string& workspace);

// Writes /proc/<pid>/{setgroups,uid_map,gid_map} for a process that just created its user
// namespace: "deny" setgroups (the supplementary groups were dropped before unsharing, and a
// sandbox must not pick new ones), then an identity map of exactly one uid and one gid.
// Returns an empty string or the failure (step, call, errno).
std::string writeIdMaps(pid_t pid, const Identity& id);

}  // namespace sandgate::sandbox
