// Applying a run's changes to its workspace (see apply_changes.h).
#include "run/apply_changes.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "common/safe_open.h"
#include "common/terminal_text.h"

namespace sandgate::run {
namespace {

using safe_open::UniqueFd;

Diagnostic failed(const std::string& why) {
  return Diagnostic{"", 0, 0, "apply", fmt::format("{} [{}]", why, reason::kApplyFailed)};
}

std::string dirName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}
std::string baseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The directory holding `path` in the tree `root`, opened beneath it with no link followed.
UniqueFd parentOf(int root, const std::string& path) {
  return UniqueFd(safe_open::openBeneath(root, dirName(path), O_PATH | O_DIRECTORY));
}

// Whether what the workspace holds at `path` is what the run started from (`before`; nullopt:
// nothing). Returns "" or why not.
std::string conflict(int ws, const Change& c) {
  UniqueFd parent = parentOf(ws, c.path);
  std::optional<FileState> now;
  if (parent.valid()) {
    now = stateAt(parent.get(), baseName(c.path));
  } else if (errno != ENOENT) {
    return fmt::format("its directory cannot be opened without following a link ({})",
                       safe_open::describeError(errno));
  }
  const auto& was = c.before;
  if (!was && !now) return "";
  if (!was) return fmt::format("it was added here meanwhile (a {})", now->type);
  if (!now) return "it was removed here meanwhile";
  if (was->type != now->type) {
    return fmt::format("it was a {} and is now a {}", was->type, now->type);
  }
  if (was->type == "dir") return "";  // its entries are checked one by one
  if (was->sha256 != now->sha256) return "its content changed since the run started";
  if (c.kind == Change::Kind::kMode && was->mode != now->mode) return "its mode changed";
  return "";
}

bool matches(const std::vector<std::string>& globs, const std::string& path) {
  if (globs.empty()) return true;
  return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) {
    return ::fnmatch(g.c_str(), path.c_str(), 0) == 0 || (g.back() == '/' && path.rfind(g, 0) == 0);
  });
}

// Whether one of --paths is `path` itself (not a glob that happens to match it).
bool namedExactly(const std::vector<std::string>& paths, const std::string& path) {
  return std::find(paths.begin(), paths.end(), path) != paths.end();
}

// Never a setuid, setgid or sticky bit from the workload.
mode_t safeMode(uint32_t mode) { return static_cast<mode_t>(mode & 0777); }

struct Writer {
  int ws;
  int upper;
  uid_t owner;
  gid_t group;
  bool chown;
  mutable uint64_t serial_ = 0;

  void own(int fd) const {
    if (chown) (void)::fchown(fd, owner, group);
  }

  // Copies the upper layer's `path` into the workspace: a temporary name, then a rename over
  // the target (a link there is replaced, never followed).
  std::optional<std::string> put(const Change& c) const {
    UniqueFd dir = parentOf(ws, c.path);
    if (!dir.valid()) return "open its directory: " + safe_open::describeError(errno);
    const std::string name = baseName(c.path);
    // Short (a long name plus a prefix could pass NAME_MAX) and new for every path.
    const std::string tmp =
        ".sandgate-apply-" + std::to_string(::getpid()) + "-" + std::to_string(serial_++);
    const FileState& after = *c.after;
    if (after.type == "dir") {
      if (c.before && c.before->type == "dir") {
        UniqueFd d(
            ::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!d.valid() || ::fchmod(d.get(), safeMode(after.mode)) != 0) {
          return std::string("chmod: ") + std::strerror(errno);
        }
        return std::nullopt;
      }
      if (::mkdirat(dir.get(), name.c_str(), 0700) != 0)
        return std::string("mkdir: ") + std::strerror(errno);
      UniqueFd d(
          ::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      own(d.get());
      if (!d.valid() || ::fchmod(d.get(), safeMode(after.mode)) != 0) {
        return std::string("chmod: ") + std::strerror(errno);
      }
      return std::nullopt;
    }
    if (after.type == "symlink") {
      ::unlinkat(dir.get(), tmp.c_str(), 0);
      if (::symlinkat(after.target.c_str(), dir.get(), tmp.c_str()) != 0) {
        return std::string("symlink: ") + std::strerror(errno);
      }
      if (chown) (void)::fchownat(dir.get(), tmp.c_str(), owner, group, AT_SYMLINK_NOFOLLOW);
    } else {
      UniqueFd from(safe_open::openBeneath(upper, c.path, O_RDONLY | O_NONBLOCK));
      if (!from.valid())
        return "open it in the run's upper layer: " + safe_open::describeError(errno);
      struct stat st {};
      if (::fstat(from.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        return std::string("it is no longer a regular file in the run's upper layer");
      }
      ::unlinkat(dir.get(), tmp.c_str(), 0);
      UniqueFd to(::openat(dir.get(), tmp.c_str(),
                           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (!to.valid()) return std::string("create: ") + std::strerror(errno);
      char buf[65536];
      for (;;) {
        ssize_t n = ::read(from.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return std::string("read: ") + std::strerror(errno);
        if (n == 0) break;
        if (!safe_open::writeAll(to.get(), std::string_view(buf, static_cast<size_t>(n)))) {
          ::unlinkat(dir.get(), tmp.c_str(), 0);
          return std::string("write: ") + std::strerror(errno);
        }
      }
      own(to.get());  // first: the mode below is the file's, whatever chown would clear
      if (::fchmod(to.get(), safeMode(after.mode)) != 0)
        return std::string("chmod: ") + std::strerror(errno);
    }
    // A directory in the way (a type change) was emptied and removed by the deletions before.
    if (::renameat(dir.get(), tmp.c_str(), dir.get(), name.c_str()) != 0) {
      int err = errno;
      ::unlinkat(dir.get(), tmp.c_str(), 0);
      return std::string("rename into place: ") + std::strerror(err);
    }
    return std::nullopt;
  }

  // A directory the plan creates because what goes in it is applied while it is not (--paths
  // 'src/**' does not match `src`): made beneath the workspace like any other, never through a
  // link, with the run's mode for it.
  std::optional<std::string> makeDir(const std::string& path, uint32_t mode) const {
    UniqueFd dir = parentOf(ws, path);
    if (!dir.valid()) return "open its directory: " + safe_open::describeError(errno);
    const std::string name = baseName(path);
    if (::mkdirat(dir.get(), name.c_str(), 0700) != 0)
      return std::string("mkdir: ") + std::strerror(errno);
    UniqueFd d(::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!d.valid()) return std::string("open: ") + std::strerror(errno);
    own(d.get());
    if (::fchmod(d.get(), safeMode(mode)) != 0)
      return std::string("chmod: ") + std::strerror(errno);
    return std::nullopt;
  }

  std::optional<std::string> chmodOnly(const Change& c) const {
    UniqueFd dir = parentOf(ws, c.path);
    if (!dir.valid()) return "open its directory: " + safe_open::describeError(errno);
    if (c.after->type == "symlink") return std::nullopt;  // a link has no mode of its own
    UniqueFd f(::openat(dir.get(), baseName(c.path).c_str(),
                        O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!f.valid() || ::fchmod(f.get(), safeMode(c.after->mode)) != 0) {
      return std::string("chmod: ") + std::strerror(errno);
    }
    return std::nullopt;
  }

  std::optional<std::string> remove(const Change& c) const {
    UniqueFd dir = parentOf(ws, c.path);
    if (!dir.valid()) return "open its directory: " + safe_open::describeError(errno);
    bool isDir = c.before && c.before->type == "dir";
    if (::unlinkat(dir.get(), baseName(c.path).c_str(), isDir ? AT_REMOVEDIR : 0) != 0 &&
        errno != ENOENT) {
      return std::string(isDir ? "rmdir: " : "unlink: ") + std::strerror(errno);
    }
    return std::nullopt;
  }
};

// One step of the plan, in the order it is carried out.
struct Step {
  enum class Op { kRemove, kMakeParent, kPut, kChmod } op;
  const Change* change = nullptr;  // kRemove, kPut, kChmod
  std::string path{};              // kMakeParent
  uint32_t mode = 0755;            // kMakeParent
};

struct Plan {
  ApplyOutcome out;  // skipped and conflicts; done is filled by whoever carries it out
  std::vector<Step> steps;
};

// Whether `path` is a directory in the workspace, reached with no link followed; errno says why
// not.
bool isDirectory(int ws, const std::string& path) {
  return UniqueFd(safe_open::openBeneath(ws, path, O_PATH | O_DIRECTORY)).valid();
}

// The one plan both apply and --check run: what is skipped, the conflicts, then the steps
// (deletions deepest first, then every directory a change needs that is not there and not
// itself applied, each before what goes in it). --check only stops before carrying the steps
// out, so it cannot promise what apply would not do.
Plan makePlan(const ChangeSet& set, int ws, const ApplyRequest& req) {
  Plan plan;
  ApplyOutcome& out = plan.out;
  std::vector<const Change*> todo;
  for (const auto& c : set.changes) {
    const std::string name = quoteName(c.path);
    if (c.git) {
      out.skipped.push_back(name + ": inside .git, never applied (review it in changes.json)");
    } else if (!c.note.empty() && ((c.after && c.after->type == "other"))) {
      out.skipped.push_back(name + ": " + escapeText(c.note));
    } else if (!matches(req.paths, c.path)) {
      continue;
    } else if (!c.note.empty() && !namedExactly(req.paths, c.path)) {
      // What the patch does not show is not what the reviewer approved: a glob is no
      // approval, the path itself is.
      out.skipped.push_back(fmt::format("{}: {}; not applied: name it with --paths {} to apply it",
                                        name, escapeText(c.note), name));
    } else {
      todo.push_back(&c);
    }
  }
  for (const Change* c : todo) {
    if (auto why = conflict(ws, *c); !why.empty()) {
      out.conflicts.push_back(quoteName(c->path) + ": " + why);
    }
  }
  std::vector<const Change*> removals, puts;
  for (const Change* c : todo) {
    bool typeChange = c->before && c->after && c->before->type != c->after->type;
    if (c->kind == Change::Kind::kDeleted || typeChange) removals.push_back(c);
    if (c->kind != Change::Kind::kDeleted) puts.push_back(c);
  }
  std::sort(removals.begin(), removals.end(),
            [](const Change* a, const Change* b) { return a->path > b->path; });
  // A path sorts before every path beneath it: a directory comes before what goes in it.
  std::sort(puts.begin(), puts.end(),
            [](const Change* a, const Change* b) { return a->path < b->path; });
  for (const Change* c : removals) plan.steps.push_back({.op = Step::Op::kRemove, .change = c});
  std::set<std::string> made;  // directories some step makes
  for (const Change* c : puts) {
    if (c->after && c->after->type == "dir") made.insert(c->path);
  }
  for (const Change* c : puts) {
    // Every missing ancestor, shallowest first. One that exists in a way that cannot be
    // entered without following a link is a conflict already (conflict() above).
    for (size_t slash = c->path.find('/'); slash != std::string::npos;
         slash = c->path.find('/', slash + 1)) {
      const std::string dir = c->path.substr(0, slash);
      if (made.count(dir) != 0) continue;
      if (isDirectory(ws, dir)) continue;
      if (errno != ENOENT) break;  // a conflict, listed
      Step s{.op = Step::Op::kMakeParent, .path = dir};
      auto it = std::find_if(set.changes.begin(), set.changes.end(),
                             [&](const Change& o) { return o.path == dir; });
      if (it != set.changes.end() && it->after && it->after->type == "dir") {
        s.mode = it->after->mode;
      }
      plan.steps.push_back(s);
      made.insert(dir);
    }
    plan.steps.push_back(
        {.op = c->kind == Change::Kind::kMode ? Step::Op::kChmod : Step::Op::kPut, .change = c});
  }
  return plan;
}

std::string describe(const Step& s) {
  switch (s.op) {
    case Step::Op::kMakeParent:
      return fmt::format("created {} (the directory of what is applied)", quoteName(s.path));
    case Step::Op::kRemove:
      return "deleted " + quoteName(s.change->path);
    default:
      return fmt::format("{} {}", kindName(s.change->kind), quoteName(s.change->path));
  }
}

}  // namespace

Result<ApplyOutcome> applyChanges(const ChangeSet& set, int workspaceFd, int upperFd,
                                  const ApplyRequest& req) {
  Plan plan = makePlan(set, workspaceFd, req);
  ApplyOutcome& out = plan.out;
  // A removal that is half of a type change is said once, by the put that follows it.
  auto said = [](const Step& s) {
    return s.op != Step::Op::kRemove || s.change->kind == Change::Kind::kDeleted;
  };
  if (!out.conflicts.empty() || req.check) {
    for (const Step& s : plan.steps) {
      if (said(s)) out.done.push_back(describe(s));
    }
    return out;
  }
  struct stat wst {};
  if (::fstat(workspaceFd, &wst) != 0) return failed(std::string("fstat: ") + std::strerror(errno));
  Writer w{workspaceFd, upperFd, wst.st_uid, wst.st_gid, ::geteuid() == 0};
  for (const Step& s : plan.steps) {
    std::optional<std::string> e;
    switch (s.op) {
      case Step::Op::kRemove:
        e = w.remove(*s.change);
        break;
      case Step::Op::kMakeParent:
        e = w.makeDir(s.path, s.mode);
        break;
      case Step::Op::kPut:
        e = w.put(*s.change);
        break;
      case Step::Op::kChmod:
        e = w.chmodOnly(*s.change);
        break;
    }
    if (e) return failed(fmt::format("{}: {}", quoteName(s.change ? s.change->path : s.path), *e));
    if (said(s)) out.done.push_back(describe(s));
  }
  return out;
}

}  // namespace sandgate::run
