// The patch of a run's changes (see changes.h formatPatch): `git diff --no-index` per file, and
// what it cannot show named, never left out unseen.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/terminal_text.h"
#include "run/changes.h"

extern char** environ;

namespace sandgate::run {
namespace {

constexpr size_t kMaxPatchBytes = 256u << 20;

Diagnostic failure(const std::string& what) { return Diagnostic{"", 0, 0, "changes", what}; }

// git's quoting of a path in a patch header (quote_c_style with core.quotepath): the one
// escaping rule the review prints names with (common/terminal_text.h).
std::string quotedPath(const std::string& prefix, const std::string& path) {
  return quoteName(prefix + path);
}

// `git diff --no-index --binary --full-index OLD NEW`, its output (bounded); exit 0 and 1 are
// both success (1: they differ). Runs with no configuration of any repository, user or system,
// and without external diff drivers or textconv: the files are the workload's.
Result<std::string> gitDiff(const std::string& oldPath, const std::string& newPath) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return failure(fmt::format("pipe: {}", std::strerror(errno)));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addchdir_np(&fa, "/");
  std::vector<std::string> args = {"git",           "-c",           "core.quotepath=true",
                                   "diff",          "--no-index",   "--binary",
                                   "--full-index",  "--no-color",   "--no-ext-diff",
                                   "--no-textconv", "--no-renames", "--",
                                   oldPath,         newPath};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> envs = {"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
                                   "HOME=/nonexistent", "GIT_CEILING_DIRECTORIES=/", "LC_ALL=C"};
  if (const char* path = std::getenv("PATH")) envs.push_back(std::string("PATH=") + path);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, "git", &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    return failure(fmt::format("cannot run git to make the patch: {}", std::strerror(rc)));
  }
  std::string text;
  char buf[65536];
  bool tooLong = false;
  for (;;) {
    ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() + static_cast<size_t>(n) > kMaxPatchBytes) {
      tooLong = true;
      break;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (tooLong) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (tooLong) return failure("the patch is larger than 256 MiB");
  if (!WIFEXITED(status) || WEXITSTATUS(status) > 1) {
    return failure(
        fmt::format("git diff --no-index {} {} failed (status {})", oldPath, newPath, status));
  }
  return text;
}

// Rewrites the header of git's diff of two file paths to name `path` on both sides.
std::string renamed(const std::string& diff, const std::string& path) {
  std::string out;
  bool inHeader = false;
  size_t pos = 0;
  while (pos < diff.size()) {
    size_t nl = diff.find('\n', pos);
    size_t end = nl == std::string::npos ? diff.size() : nl + 1;
    std::string line = diff.substr(pos, end - pos);
    pos = end;
    if (line.rfind("diff --git ", 0) == 0) {
      inHeader = true;
      out += "diff --git " + quotedPath("a/", path) + " " + quotedPath("b/", path) + "\n";
      continue;
    }
    if (inHeader && (line.rfind("@@", 0) == 0 || line.rfind("GIT binary patch", 0) == 0)) {
      inHeader = false;
    } else if (inHeader && line.rfind("--- ", 0) == 0) {
      line = line.rfind("--- /dev/null", 0) == 0 ? line : "--- " + quotedPath("a/", path) + "\n";
    } else if (inHeader && line.rfind("+++ ", 0) == 0) {
      line = line.rfind("+++ /dev/null", 0) == 0 ? line : "+++ " + quotedPath("b/", path) + "\n";
    }
    out += line;
  }
  return out;
}

// git's file mode of a state.
const char* gitMode(const FileState& s) { return (s.mode & 0111) != 0 ? "100755" : "100644"; }

// A change the patch does not show: a comment line naming it, its size and hash (git apply
// skips it), then, for a file, git's lines for a binary change without its bytes, so that the
// path is in the patch and `git apply` refuses it rather than leaving it out.
std::string notShown(const Change& c, const std::string& path) {
  const FileState& s = c.after ? *c.after : *c.before;
  std::string out = fmt::format(
      "# sandgate: not shown: {} {} ({}; {} bytes, sha256 {}); `sandgate apply` applies it only "
      "when --paths names it exactly\n",
      kindName(c.kind), quotedPath("", path), escapeText(c.note, true), s.size,
      s.sha256.empty() ? "unknown" : s.sha256);
  bool had = c.before && c.before->type == "file", has = c.after && c.after->type == "file";
  if ((c.before && !had) || (c.after && !has)) return out;  // not a file: no git form
  const std::string a = quotedPath("a/", path), b = quotedPath("b/", path);
  out += "diff --git " + a + " " + b + "\n";
  if (!had) {
    out += fmt::format("new file mode {}\n", gitMode(*c.after));
  } else if (!has) {
    out += fmt::format("deleted file mode {}\n", gitMode(*c.before));
  } else if (std::string_view(gitMode(*c.before)) != gitMode(*c.after)) {
    out += fmt::format("old mode {}\nnew mode {}\n", gitMode(*c.before), gitMode(*c.after));
  }
  out += fmt::format("Binary files {} and {} differ\n", had ? a : "/dev/null",
                     has ? b : "/dev/null");
  return out;
}

}  // namespace

Result<std::string> formatPatch(ChangeSet* set, const std::string& lowerPath,
                                const std::string& upperPath, std::vector<std::string>* skipped) {
  std::string patch;
  const std::string prefix = set->gitPrefix.value_or("");
  // Every .git path first: listed, never shown, never applied (comment lines `git apply`
  // skips).
  for (const auto& c : set->changes) {
    if (!c.git) continue;
    patch += fmt::format("# sandgate: inside .git, not shown, never applied: {} {}{}\n",
                         kindName(c.kind), quotedPath(prefix, c.path),
                         c.flagged ? " (FLAGGED: git runs it or obeys it)" : "");
  }
  for (auto& c : set->changes) {
    if (c.git) continue;
    if (!c.note.empty()) {
      patch += notShown(c, prefix + c.path);
      continue;
    }
    // Directories are implied by the files in them (git tracks no directory).
    if ((!c.before || c.before->type == "dir") && (!c.after || c.after->type == "dir")) continue;
    const std::string oldPath = lowerPath + "/" + c.path;
    const std::string newPath = upperPath + "/" + c.path;
    std::vector<std::pair<std::string, std::string>> pairs;
    bool hadFile = c.before && c.before->type != "dir";
    bool hasFile = c.after && c.after->type != "dir";
    if (hadFile && hasFile && c.before->type != c.after->type) {
      pairs = {{oldPath, "/dev/null"}, {"/dev/null", newPath}};  // a type change
    } else {
      pairs = {{hadFile ? oldPath : "/dev/null", hasFile ? newPath : "/dev/null"}};
    }
    std::string text;
    for (const auto& [a, b] : pairs) {
      auto diff = gitDiff(a, b);
      if (!diff) {
        skipped->push_back(c.path + ": " + diff.errors().front().message);
        text.clear();
        // Not shown, so never applied unless named (apply_changes.h).
        c.note = "git could not read it: not shown in the patch";
        text = notShown(c, prefix + c.path);
        break;
      }
      text += renamed(diff.value(), prefix + c.path);
    }
    patch += text;
    if (patch.size() > kMaxPatchBytes) return failure("the patch is larger than 256 MiB");
  }
  return patch;
}

}  // namespace sandgate::run
