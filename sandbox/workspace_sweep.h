// The end of a bind run: the workspace swept for privilege the run may have left on the host
// (setuid/setgid bits, file capabilities), the second line behind bind_filter.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sandgate::sandbox {

struct WorkspaceSweep {
  uint64_t cleared = 0;             // files whose setuid/setgid bits or capability were removed
  std::vector<std::string> paths;   // their paths relative to the workspace (the first 100)
  std::vector<std::string> errors;  // what could not be swept ("path: reason", the first 100)
};

// Walks the workspace `workspaceFd` (a descriptor of the directory, O_PATH is enough) once
// every process of the run is gone, by descriptor only: each directory opened with openat
// (O_NOFOLLOW) relative to its parent, no symbolic link followed, no other mount entered, each
// file acted on through a descriptor of the inode that was checked. On every regular file it
// clears S_ISUID and S_ISGID and removes security.capability. Directories keep a setgid bit (it
// makes new files take the directory's group, and grants nothing by exec; a host may set it on
// a shared project). A launcher that is not root opens a directory it owns but may not read by
// adding u+rx for the walk and putting the mode back. Deeper than 256 levels is an error.
// When it cleared or missed something it says so on stderr and in `warnings`.
WorkspaceSweep sweepWorkspace(int workspaceFd, std::vector<std::string>* warnings);

}  // namespace sandgate::sandbox
