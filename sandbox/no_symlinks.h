// Opening a path without following any symbolic link in it (openat2 RESOLVE_NO_SYMLINKS).
#pragma once

#include <string>

namespace sandgate::sandbox {

// open(2) of `path` with `flags`, failing with ELOOP if any component is a symbolic link (or a
// /proc magic link). Kernels without openat2 (before 5.6): each component is opened with
// O_NOFOLLOW from the one before. Returns the descriptor or -1 with errno set.
int openNoSymlinks(const std::string& path, int flags);

}  // namespace sandgate::sandbox
