// Giving up privileges before exec: resource limits, no_new_privs, every capability.
#pragma once

#include <cstdint>
#include <vector>

namespace sandgate::sandbox {

// RLIMIT_CORE 0 (no core files of a process that may hold placeholders or tokens it fetched)
// and RLIMIT_NOFILE = min(maxOpenFiles, the hard limit). Throws SetupError.
void applyResourceLimits(uint64_t maxOpenFiles);

// Sets no_new_privs, locks the securebits (no root fixups, no ambient raise), drops every
// capability from the bounding set, clears the ambient set and empties the permitted, effective
// and inheritable sets. Needs CAP_SETPCAP in the current user namespace. Throws SetupError.
void dropPrivileges();

// Closes every descriptor >= 3 except those in `keep` (-1 entries are ignored). Throws
// SetupError.
void closeOtherDescriptors(std::vector<int> keep);

}  // namespace sandgate::sandbox
