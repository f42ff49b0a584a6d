// The files `sandgate run` writes on the host besides ca_cert_out (--report, the embedded
// proxy's audit.path): opened before the sandbox starts, never inside the workspace, with no
// symbolic link followed, so that nothing the workload plants can redirect them.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/result.h"
#include "common/safe_open.h"

namespace sandgate::run {

// Reason tokens of the refusals below (at the end of their message, for scripts and tests).
namespace reason {
inline constexpr std::string_view kOutputInWorkspace = "output_in_workspace";
inline constexpr std::string_view kOutputUnopenable = "output_unopenable";
}  // namespace reason

// The directory the run will use as its workspace, by device and inode: a path can name it
// through a link or `..`, its identity cannot.
struct WorkspaceId {
  std::string path;  // for messages: as given, or the current directory's path and "(the ...)"
  dev_t dev = 0;
  ino_t ino = 0;
};
Result<WorkspaceId> identifyWorkspace(const std::string& workspace);

// Opens `path` for writing (`flags` such as O_TRUNC or O_APPEND; O_WRONLY|O_CREAT|O_CLOEXEC
// added; `mode` for a new file) with no link followed on the way, and refuses it when its
// directory is the workspace or lies below it: the workload can write there and plant a link
// or a hard link to any host file before (or while) we write. `what` ("--report", "audit.path")
// names it in the messages, which say what to do.
Result<safe_open::UniqueFd> openOutsideWorkspace(std::string_view what, const std::string& path,
                                                 const WorkspaceId& workspace, int flags,
                                                 mode_t mode);

}  // namespace sandgate::run
