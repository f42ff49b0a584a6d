// /etc/resolv.conf inside the sandbox (transparent mode): points at the DNS stub.
#pragma once

#include <string>
#include <vector>

#include "sandbox/filesystem.h"

namespace sandgate::sandbox {

// Launcher side: sets plan->resolvConf (the file's text) and plan->resolvConfTarget (where the
// host's /etc/resolv.conf really is: a symlink such as systemd's ../run/systemd/resolve/
// stub-resolv.conf is followed, even when it dangles, so the sandbox's resolver reads ours).
void planResolvConf(FilesystemPlan* plan);

// Sandbox side, before the pivot into `newRoot`: a target under a private tmpfs (/run, /tmp)
// is created there; any other is covered by a read-only bind of /run/sandgate/resolv.conf.
// A target that cannot be covered is a warning (the command's DNS then fails: no server).
void installResolvConf(const std::string& newRoot, const FilesystemPlan& plan,
                       std::vector<std::string>* warnings);

}  // namespace sandgate::sandbox
