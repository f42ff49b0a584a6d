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
  // Root launcher: the lease on `uid` (a flock on /run/sandgate/ids/<uid>, released when this
  // descriptor is closed, after the run); -1 for an explicit uid or a rootless run.
  int leaseFd = -1;
};

// Applies the rules documented on Options (never uid 0): a root launcher leases a uid of its own
// from options.idRangeFirst/idRangeCount (gid = uid), one no other run holds and no user or
// group of the host's databases has; a rootless one keeps its own ids.
Result<Identity> chooseIdentity(const Options& options);

// Writes /proc/<pid>/{setgroups,uid_map,gid_map} for a process that just created its user
// namespace: "deny" setgroups (the supplementary groups were dropped before unsharing, and a
// sandbox must not pick new ones), then an identity map of exactly one uid and one gid.
// Returns an empty string or the failure (step, call, errno).
std::string writeIdMaps(pid_t pid, const Identity& id);

// Writes `content` to a /proc file (an id map, setgroups) in one write(2), as the kernel wants
// them. Returns an empty string or the failure (step, call, errno).
std::string writeProcFile(const std::string& path, const std::string& content);

}  // namespace sandgate::sandbox
