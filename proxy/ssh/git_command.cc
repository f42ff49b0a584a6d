// Strict parsing of the exec command an SSH client sends for git (see git_command.h).
#include "proxy/ssh/git_command.h"

#include <algorithm>
#include <cctype>

#include "policy/git_rules.h"

namespace sandgate::proxy::ssh {
namespace {

// A repository path longer than this is not a repository any forge serves.
constexpr size_t kMaxPathBytes = 1024;

bool pathByteOk(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '/' ||
         c == '-';
}

}  // namespace

std::string_view serviceName(GitService s) {
  switch (s) {
    case GitService::kUploadPack:
      return "git-upload-pack";
    case GitService::kReceivePack:
      return "git-receive-pack";
    case GitService::kUploadArchive:
      return "git-upload-archive";
  }
  return "git-upload-pack";
}

std::string GitCommand::upstreamCommand() const {
  // The path holds no quote (parseGitCommand), so single quotes delimit it exactly. It goes
  // without its leading '/': forges read "org/repo.git" and "/org/repo.git" alike, and a plain
  // sshd with git-shell resolves the first in the git user's home, never from the root.
  std::string_view p = path;
  if (!p.empty() && p.front() == '/') p.remove_prefix(1);
  return std::string(serviceName(service)) + " '" + std::string(p) + "'";
}

std::optional<GitCommand> parseGitCommand(std::string_view command, std::string* why) {
  GitCommand out;
  const size_t space = command.find(' ');
  if (space == std::string_view::npos) {
    *why =
        "only git-upload-pack, git-receive-pack and git-upload-archive with a repository path "
        "are served";
    return std::nullopt;
  }
  const std::string_view program = command.substr(0, space);
  // Git also accepts "git upload-pack" (with a space) from some clients; OpenSSH-driven git
  // sends the dashed form, the only one accepted here.
  if (program == "git-upload-pack") {
    out.service = GitService::kUploadPack;
  } else if (program == "git-receive-pack") {
    out.service = GitService::kReceivePack;
  } else if (program == "git-upload-archive") {
    out.service = GitService::kUploadArchive;
  } else {
    *why = "only git-upload-pack, git-receive-pack and git-upload-archive are served";
    return std::nullopt;
  }
  std::string_view arg = command.substr(space + 1);
  if (arg.size() >= 2 && arg.front() == '\'' && arg.back() == '\'') {
    arg = arg.substr(1, arg.size() - 2);
  }
  if (arg.empty() || arg.size() > kMaxPathBytes) {
    *why = "the repository path is empty or too long";
    return std::nullopt;
  }
  if (!std::all_of(arg.begin(), arg.end(), pathByteOk)) {
    *why =
        "the repository path may hold only letters, digits, '.', '_', '-' and '/' (one "
        "argument, no quotes, spaces or shell syntax)";
    return std::nullopt;
  }
  std::string_view rest = arg;
  if (rest.front() == '/') rest.remove_prefix(1);
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  // Each segment must be a plain name: '.' and '..' would let the upstream resolve another
  // repository than the one judged, and an empty one is a spelling the rules never see.
  size_t start = 0;
  while (true) {
    const size_t slash = rest.find('/', start);
    const std::string_view seg = rest.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    // A '-'-led argument would be read by the upstream's git as an option.
    if (seg.empty() || seg == "." || seg == ".." || seg.front() == '-') {
      *why = "the repository path has an empty, '.', '..' or '-'-led segment";
      return std::nullopt;
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  // The name the HTTP git gate would judge for the same path: "x/.git" is x, the repository
  // the upstream opens for it, never a name "x/" that no rule about x matches.
  std::string repository = sandgate::policy::gitRepositoryName(rest);
  if (repository.empty() || repository.ends_with('/')) {
    *why = "the repository path names no repository (only a '.git' directory)";
    return std::nullopt;
  }
  out.path.assign(arg);
  out.repository = std::move(repository);
  return out;
}

}  // namespace sandgate::proxy::ssh
