// Reading a run's changes from its overlay layers, and writing them as JSON (see changes.h;
// the patch is change_patch.cc).
#include "run/changes.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "common/safe_open.h"
#include "sandbox/paths.h"

namespace sandgate::run {
namespace {

using safe_open::UniqueFd;

constexpr int kMaxDepth = 256;
constexpr size_t kMaxEntries = 1000000;

Diagnostic failure(const std::string& what) { return Diagnostic{"", 0, 0, "changes", what}; }

std::string hex(const unsigned char* p, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kHex[p[i] >> 4];
    out += kHex[p[i] & 0xf];
  }
  return out;
}

// sha256 of the regular file `name` in `dir`, opened without following a link; "" if it cannot
// be read.
std::string sha256File(int dir, const std::string& name) {
  UniqueFd fd(::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return "";
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  char buf[65536];
  bool ok = true;
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0) break;
    EVP_DigestUpdate(ctx, buf, static_cast<size_t>(n));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  return ok ? hex(md, len) : "";
}

bool isWhiteout(const struct stat& st) {
  return S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0;
}

bool isOpaque(int dirFd) {
  char v[4] = {};
  for (const char* name : {"user.overlay.opaque", "trusted.overlay.opaque"}) {
    ssize_t n = ::fgetxattr(dirFd, name, v, sizeof v);
    if (n >= 1 && v[0] == 'y') return true;
  }
  return false;
}

FileState stateOf(int dir, const std::string& name, const struct stat& st) {
  FileState s;
  s.mode = st.st_mode & 07777;
  if (S_ISREG(st.st_mode)) {
    s.type = "file";
    s.size = static_cast<uint64_t>(st.st_size);
    s.sha256 = sha256File(dir, name);
  } else if (S_ISDIR(st.st_mode)) {
    s.type = "dir";
  } else if (S_ISLNK(st.st_mode)) {
    s.type = "symlink";
    char buf[4096];
    ssize_t n = ::readlinkat(dir, name.c_str(), buf, sizeof buf);
    if (n > 0) s.target.assign(buf, static_cast<size_t>(n));
    s.size = s.target.size();
    s.sha256 = sha256Hex(s.target);
  } else {
    s.type = "other";
  }
  return s;
}

std::vector<std::string> entries(int dir) { return sandbox::listDirectory(dir); }

bool isGitPath(const std::string& path) {
  return path == ".git" || path.rfind(".git/", 0) == 0 ||
         path.find("/.git/") != std::string::npos ||
         (path.size() >= 5 && path.compare(path.size() - 5, 5, "/.git") == 0);
}

// What git runs or obeys outside the sandbox, anywhere in a .git directory (a nested
// repository's, a submodule's under modules/): hooks, config (core.hooksPath, core.fsmonitor,
// aliases, filters), info/ (attributes, excludes), and what points git at another directory
// (objects/info/alternates, commondir, gitdir, a .git file). Every other .git path is listed
// apart too (it is never in the patch nor applied); these are flagged first.
bool isFlaggedGitPath(const std::string& path) {
  static const std::set<std::string> kRun = {"hooks",   "config",   "config.worktree", "info",
                                             "commondir", "gitdir", "alternates"};
  bool inGit = false;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    std::string part =
        path.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    if (inGit && kRun.count(part)) return true;
    if (part == ".git") {
      inGit = true;
      if (slash == std::string::npos) return true;  // .git itself: a directory or a gitdir file
    }
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return false;
}

class Collector {
 public:
  Collector(ChangeSet* out, bool fullCopy) : out_(out), fullCopy_(fullCopy) {}

  std::string error;

  void add(Change::Kind kind, const std::string& path, std::optional<FileState> before,
           std::optional<FileState> after) {
    if (++count_ > kMaxEntries) {
      if (error.empty()) error = fmt::format("more than {} changed entries", kMaxEntries);
      return;
    }
    Change c;
    c.kind = kind;
    c.path = path;
    c.before = std::move(before);
    c.after = std::move(after);
    c.git = isGitPath(path);
    c.flagged = c.git && isFlaggedGitPath(path);
    out_->changes.push_back(std::move(c));
  }

  // Everything the lower directory `dir`/`name` holds is deleted.
  void deletedBelow(int dir, const std::string& name, const std::string& path, int depth) {
    if (depth >= kMaxDepth) return;
    UniqueFd sub(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub.valid()) return;
    for (const auto& e : entries(sub.get())) {
      struct stat est {};
      if (::fstatat(sub.get(), e.c_str(), &est, AT_SYMLINK_NOFOLLOW) == 0) {
        deleted(sub.get(), e, path + "/" + e, est, depth + 1);
      }
    }
  }

  void deleted(int dir, const std::string& name, const std::string& path, const struct stat& st,
               int depth) {
    if (S_ISDIR(st.st_mode)) deletedBelow(dir, name, path, depth);
    add(Change::Kind::kDeleted, path, stateOf(dir, name, st), std::nullopt);
  }

  // Walks the upper directory `upper` against the lower `lower` (-1: none there).
  void walk(int upper, int lower, const std::string& prefix, bool opaque, int depth) {
    if (depth > kMaxDepth) {
      if (error.empty())
        error = "the upper layer is nested deeper than " + std::to_string(kMaxDepth);
      return;
    }
    std::set<std::string> seen;
    for (const auto& name : entries(upper)) {
      seen.insert(name);
      const std::string path = prefix + name;
      struct stat ust {
      }, lst{};
      if (::fstatat(upper, name.c_str(), &ust, AT_SYMLINK_NOFOLLOW) != 0) continue;
      bool inLower = lower >= 0 && ::fstatat(lower, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0;
      if (isWhiteout(ust)) {
        if (inLower) deleted(lower, name, path, lst, depth);
        continue;
      }
      if (S_ISDIR(ust.st_mode)) {
        UniqueFd sub(
            ::openat(upper, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub.valid()) continue;
        bool subOpaque = fullCopy_ || isOpaque(sub.get());
        if (inLower && S_ISDIR(lst.st_mode)) {
          if ((lst.st_mode & 07777) != (ust.st_mode & 07777)) {
            add(Change::Kind::kMode, path, stateOf(lower, name, lst), stateOf(upper, name, ust));
          }
          UniqueFd subLower(
              ::openat(lower, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
          walk(sub.get(), subLower.get(), path + "/", subOpaque, depth + 1);
        } else {
          // A new directory, or one that replaces a lower file (one change: its type).
          add(inLower ? Change::Kind::kModified : Change::Kind::kAdded, path,
              inLower ? std::optional(stateOf(lower, name, lst)) : std::nullopt,
              stateOf(upper, name, ust));
          walk(sub.get(), -1, path + "/", false, depth + 1);
        }
        continue;
      }
      FileState after = stateOf(upper, name, ust);
      if (inLower && S_ISDIR(lst.st_mode)) {
        // A lower directory replaced by a file or link: what it held goes, then its type.
        deletedBelow(lower, name, path, depth);
        add(Change::Kind::kModified, path, stateOf(lower, name, lst), std::move(after));
        continue;
      }
      if (!inLower) {
        add(Change::Kind::kAdded, path, std::nullopt, std::move(after));
        continue;
      }
      FileState before = stateOf(lower, name, lst);
      if (before.type != after.type || before.sha256 != after.sha256) {
        add(Change::Kind::kModified, path, std::move(before), std::move(after));
      } else if (before.mode != after.mode) {
        add(Change::Kind::kMode, path, std::move(before), std::move(after));
      }
    }
    if (opaque && lower >= 0) {
      // An opaque directory hides every lower entry it does not hold itself.
      for (const auto& name : entries(lower)) {
        if (seen.count(name)) continue;
        struct stat lst {};
        if (::fstatat(lower, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0) {
          deleted(lower, name, prefix + name, lst, depth);
        }
      }
    }
  }

 private:
  ChangeSet* out_;
  bool fullCopy_;
  size_t count_ = 0;
};

// The work tree's top above `dir` (the first directory up holding `.git`), or nullopt.
std::optional<std::string> gitPrefixOf(const std::string& dir) {
  std::string cur = dir;
  for (int i = 0; i < 256; ++i) {
    struct stat st {};
    if (::lstat((cur + "/.git").c_str(), &st) == 0 &&
        (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
      if (cur == dir) return std::string();
      return dir.substr(cur == "/" ? 1 : cur.size() + 1) + "/";
    }
    if (cur == "/" || cur.empty()) break;
    size_t slash = cur.rfind('/');
    cur = slash == 0 ? "/" : cur.substr(0, slash);
  }
  return std::nullopt;
}

boost::json::value stateToJson(const std::optional<FileState>& s) {
  if (!s) return nullptr;
  boost::json::object o;
  o["type"] = s->type;
  o["mode"] = fmt::format("{:04o}", s->mode);
  o["size"] = s->size;
  o["sha256"] = s->sha256.empty() ? boost::json::value(nullptr) : boost::json::value(s->sha256);
  if (s->type == "symlink") o["target"] = s->target;
  return o;
}

std::optional<FileState> stateFromJson(const boost::json::value& v) {
  if (v.is_null()) return std::nullopt;
  const auto& o = v.as_object();
  FileState s;
  s.type = std::string(o.at("type").as_string());
  s.mode = static_cast<uint32_t>(std::stoul(std::string(o.at("mode").as_string()), nullptr, 8));
  s.size = o.at("size").to_number<uint64_t>();
  if (o.at("sha256").is_string()) s.sha256 = std::string(o.at("sha256").as_string());
  if (auto* t = o.if_contains("target")) s.target = std::string(t->as_string());
  return s;
}

}  // namespace

std::string sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return hex(md, len);
}

const char* kindName(Change::Kind kind) {
  switch (kind) {
    case Change::Kind::kAdded:
      return "added";
    case Change::Kind::kDeleted:
      return "deleted";
    case Change::Kind::kModified:
      return "modified";
    case Change::Kind::kMode:
      return "mode";
  }
  return "unknown";
}

std::optional<FileState> stateAt(int dir, const std::string& name) {
  struct stat st {};
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return std::nullopt;
  return stateOf(dir, name, st);
}

Result<ChangeSet> collectChanges(int lowerFd, int upperFd, const std::string& workspacePath,
                                 bool fullCopy) {
  ChangeSet set;
  UniqueFd lower(::openat(lowerFd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!lower.valid()) return failure(fmt::format("open the workspace: {}", std::strerror(errno)));
  Collector c(&set, fullCopy);
  c.walk(upperFd, lower.get(), "", fullCopy, 0);
  if (!c.error.empty()) return failure(c.error);
  std::stable_sort(set.changes.begin(), set.changes.end(),
                   [](const Change& a, const Change& b) { return a.path < b.path; });
  set.gitPrefix = gitPrefixOf(workspacePath);
  for (auto& ch : set.changes) {
    if (ch.git) {
      ch.note = "inside .git: not in the patch, never applied";
    } else if ((ch.before && ch.before->type == "other") ||
               (ch.after && ch.after->type == "other")) {
      ch.note = "not a regular file, directory or symbolic link: not in the patch";
    } else if (ch.kind != Change::Kind::kMode &&
               ((ch.before && ch.before->size > kMaxPatchFileBytes) ||
                (ch.after && ch.after->size > kMaxPatchFileBytes))) {
      // A mode change alone is shown whole (its content is the same); any other change of a
      // file this large is a stub in the patch, which `apply` applies only when named.
      ch.note = fmt::format("larger than {} MiB: not shown in the patch", kMaxPatchFileBytes >> 20);
    }
  }
  return set;
}

boost::json::value changesToJson(const ChangeSet& set) {
  boost::json::object o;
  boost::json::array list;
  for (const auto& c : set.changes) {
    boost::json::object e;
    e["path"] = c.path;
    e["kind"] = kindName(c.kind);
    e["before"] = stateToJson(c.before);
    e["after"] = stateToJson(c.after);
    e["git"] = c.git;
    e["flagged"] = c.flagged;
    if (!c.note.empty()) e["note"] = c.note;
    list.push_back(std::move(e));
  }
  o["changes"] = std::move(list);
  o["git_prefix"] = set.gitPrefix ? boost::json::value(*set.gitPrefix) : nullptr;
  return o;
}

Result<ChangeSet> changesFromJson(const std::string& text) {
  try {
    // Names are the workload's bytes, not always UTF-8: Boost.JSON wrote them as they are.
    boost::json::parse_options options;
    options.allow_invalid_utf8 = true;
    auto v = boost::json::parse(text, {}, options);
    ChangeSet set;
    const auto& o = v.as_object();
    if (o.at("git_prefix").is_string()) set.gitPrefix = std::string(o.at("git_prefix").as_string());
    for (const auto& ev : o.at("changes").as_array()) {
      const auto& e = ev.as_object();
      Change c;
      c.path = std::string(e.at("path").as_string());
      std::string kind(e.at("kind").as_string());
      c.kind = kind == "added"      ? Change::Kind::kAdded
               : kind == "deleted"  ? Change::Kind::kDeleted
               : kind == "modified" ? Change::Kind::kModified
                                    : Change::Kind::kMode;
      c.before = stateFromJson(e.at("before"));
      c.after = stateFromJson(e.at("after"));
      c.git = e.at("git").as_bool();
      c.flagged = e.at("flagged").as_bool();
      if (auto* n = e.if_contains("note")) c.note = std::string(n->as_string());
      set.changes.push_back(std::move(c));
    }
    return set;
  } catch (const std::exception& e) {
    return failure(fmt::format("changes.json is not what sandgate wrote: {}", e.what()));
  }
}

boost::json::value changeSummary(const ChangeSet& set) {
  std::map<std::string, uint64_t> counts = {
      {"added", 0}, {"deleted", 0}, {"modified", 0}, {"mode", 0}};
  boost::json::array paths, flagged;
  uint64_t git = 0;
  for (const auto& c : set.changes) {
    if (c.git) {
      ++git;
      if (c.flagged) flagged.emplace_back(c.path);
      continue;
    }
    ++counts[kindName(c.kind)];
    if (paths.size() < 100) paths.emplace_back(c.path);
  }
  boost::json::object o;
  for (const auto& [k, n] : counts) o[k] = n;
  o["git"] = git;
  o["flagged"] = std::move(flagged);
  o["paths"] = std::move(paths);
  return o;
}

}  // namespace sandgate::run
