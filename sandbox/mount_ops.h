// Mount operations of the sandbox's side of the view (filesystem.cc): in the new mount
// namespace, with the staging root's /newroot (the view being built) and /oldroot (the host's
// tree, the source of every bind).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace sandgate::sandbox {

inline constexpr const char* kNew = "/newroot";
inline constexpr const char* kOld = "/oldroot";

// The flags a bind remount must carry over: in a user namespace the kernel locks nosuid, nodev,
// noexec and the atime flags of mounts inherited from the host, and a remount that would clear
// them fails with EPERM. `err`: statvfs's errno, or 0.
unsigned long lockedFlags(const std::string& path, int* err);

// mkdir -p; throws SetupError.
void mkdirs(const std::string& path, mode_t mode);

// Every mount at or under `top` becomes read-only (a recursive bind alone keeps each submount
// writable, and MS_REC|MS_RDONLY is ignored on a bind: each one needs its own remount).
void remountTreeReadOnly(const std::string& top);

void mountTmpfs(const std::string& target, unsigned long flags, const char* data,
                const std::string& step);

// A directory of the view, `path` (shown from the host), rebuilt without the entries `names`:
// an empty tmpfs over it with every other entry of the host's directory bound back read-only
// (links copied). What it leaves out never becomes a mount point, so neither the view nor
// /proc/self/mountinfo names it. `uid`/`gid`: the sandbox's, for the directory's mode (the
// access they had to the host's directory). Throws SetupError; `warnings` gets a directory
// that cannot be listed (then left empty: nothing of it is shown).
void buildWithout(const std::string& path, const std::vector<std::string>& names, uid_t uid,
                  gid_t gid, std::vector<std::string>* warnings);

}  // namespace sandgate::sandbox
