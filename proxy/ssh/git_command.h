// The one thing an SSH client may ask the broker to run: git's own transport commands,
// `git-upload-pack '<path>'`, `git-receive-pack '<path>'`, `git-upload-archive '<path>'`,
// parsed strictly (no shell ever sees them) and the path normalised to the repository name the
// `git:` rules match, as the HTTP git gate does. Pure; no libssh.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandgate::proxy::ssh {

enum class GitService { kUploadPack, kReceivePack, kUploadArchive };

struct GitCommand {
  GitService service = GitService::kUploadPack;
  // The path as the client wrote it (without quotes): what goes upstream, re-quoted.
  std::string path;
  // owner/name as policy::gitRepositoryName gives it: no leading '/', no trailing ".git",
  // "/.git" or '/', lower-cased.
  std::string repository;
  // The command sent upstream: `<service> '<path>'`, the path without a leading '/'. Built
  // from the parsed parts, never the client's text, so nothing the client added survives.
  std::string upstreamCommand() const;
};

std::string_view serviceName(GitService s);

// Parses an exec request's command. nullopt with `*why` (one sentence) for anything else: other
// programs, options, several arguments, shell syntax (`;`, `|`, `$`, backquotes, redirections,
// newlines), a path with quotes or backslashes, `..` or `.` segments, empty or '-'-led segments,
// `~`, or bytes outside [A-Za-z0-9._/-] (percent signs included: a forge might decode them).
std::optional<GitCommand> parseGitCommand(std::string_view command, std::string* why);

}  // namespace sandgate::proxy::ssh
