// Host files of `sandgate run` outside the workspace (see output_files.h).
#include "run/output_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace sandgate::run {

Result<WorkspaceId> identifyWorkspace(const std::string& workspace) {
  const std::string path = workspace.empty() ? "." : workspace;
  struct stat st {};
  // Followed on purpose: whether the launcher follows a link there or refuses it, the only
  // directory that could become the workspace is the one it points at.
  if (::stat(path.c_str(), &st) != 0) {
    return Diagnostic{
        "", 0, 0, "",
        fmt::format("workspace {}: {}", workspace.empty() ? "(the current directory)" : workspace,
                    std::strerror(errno))};
  }
  std::string shown = workspace;
  if (shown.empty()) {
    char cwd[PATH_MAX];
    shown = ::getcwd(cwd, sizeof cwd) ? std::string(cwd) + " (the current directory)"
                                      : std::string("(the current directory)");
  }
  return WorkspaceId{shown, st.st_dev, st.st_ino};
}

Result<safe_open::UniqueFd> openOutsideWorkspace(std::string_view what, const std::string& path,
                                                 const WorkspaceId& workspace, int flags,
                                                 mode_t mode) {
  auto refuse = [&](std::string_view token, const std::string& why) {
    return Diagnostic{"", 0, 0, std::string(what), fmt::format("{} [{}]", why, token)};
  };
  auto cannotOpen = [&](int err) {
    return refuse(reason::kOutputUnopenable, fmt::format("cannot open {} for writing: {}", path,
                                                         safe_open::describeError(err)));
  };
  // The directory is opened once, checked, and the file created in it through the same
  // descriptor: no path is looked up twice.
  auto parent = safe_open::openParent(path);
  if (!parent) return cannotOpen(errno);
  int within = safe_open::isWithin(parent->dir.get(), workspace.dev, workspace.ino);
  if (within < 0) return cannotOpen(errno);
  if (within == 1) {
    return refuse(
        reason::kOutputInWorkspace,
        fmt::format("{} is inside the workspace {}: put it outside the workspace (the "
                    "sandbox can write there and plant a link that sandgate would "
                    "write through)",
                    path, workspace.path.empty() ? "(the current directory)" : workspace.path));
  }
  // O_NONBLOCK: a FIFO there must fail (ENXIO), not block the launcher until a reader comes.
  safe_open::UniqueFd fd(safe_open::openBeneath(
      parent->dir.get(), parent->name, O_WRONLY | O_CREAT | O_NOCTTY | O_NONBLOCK | flags, mode));
  if (!fd.valid()) return cannotOpen(errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return cannotOpen(errno);
  if (!S_ISREG(st.st_mode)) {
    return refuse(reason::kOutputUnopenable,
                  fmt::format("{} is not a regular file: give the path of a file", path));
  }
  int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) return cannotOpen(errno);
  return fd;
}

}  // namespace sandgate::run
