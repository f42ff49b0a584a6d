// The run's directory (see run_dir.h).
#include "run/run_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "sandbox/layer_copy.h"
#include "sandbox/paths.h"

namespace sandgate::run {
namespace {

Diagnostic refuse(std::string_view token, const std::string& why) {
  return Diagnostic{"", 0, 0, "run directory", fmt::format("{} [{}]", why, token)};
}

std::string newRunId() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y%m%d-%H%M%S", &tm);
  unsigned char raw[3] = {};
  if (getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) {
    auto n = static_cast<uint32_t>(getpid());
    std::memcpy(raw, &n, sizeof raw);
  }
  return fmt::format("{}-{:02x}{:02x}{:02x}", when, raw[0], raw[1], raw[2]);
}

// mkdir -p of an absolute path the launcher's user chose (its home, /var/lib): the new
// components get `mode`.
bool makeDirectories(const std::string& path, mode_t mode) {
  for (size_t pos = 1; pos <= path.size();) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    std::string cur = path.substr(0, next);
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) return false;
    pos = next + 1;
  }
  return true;
}

}  // namespace

Result<safe_open::UniqueFd> RunDir::create(const std::string& name, mode_t mode) const {
  safe_open::UniqueFd out(::openat(fd.get(), name.c_str(),
                                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!out.valid()) {
    return refuse(reason::kRunDirUnusable, fmt::format("cannot create {}/{}: {}", path, name,
                                                       safe_open::describeError(errno)));
  }
  return out;
}

std::optional<std::string> RunDir::write(const std::string& name, std::string_view data) const {
  auto f = create(name);
  if (!f) return f.errors().front().message;
  if (!safe_open::writeAll(f.value().get(), data)) {
    return fmt::format("cannot write {}/{}: {}", path, name, std::strerror(errno));
  }
  return std::nullopt;
}

Result<std::string> RunDir::read(const std::string& name, size_t limit) const {
  safe_open::UniqueFd f(safe_open::openBeneath(fd.get(), name, O_RDONLY));
  if (!f.valid()) {
    return refuse(reason::kRunDirUnusable,
                  fmt::format("cannot read {}/{}: {}", path, name, safe_open::describeError(errno)));
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(f.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return refuse(reason::kRunDirUnusable,
                    fmt::format("cannot read {}/{}: {}", path, name, std::strerror(errno)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > limit) {
      return refuse(reason::kRunDirUnusable, fmt::format("{}/{} is larger than {} bytes", path,
                                                         name, limit));
    }
  }
  return out;
}

std::string nowUtc() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string defaultRunsDirectory() {
  if (const char* s = std::getenv("SANDGATE_RUNS_DIR"); s != nullptr && s[0] == '/') return s;
  if (::geteuid() == 0) return "/var/lib/sandgate/runs";
  if (const char* s = std::getenv("XDG_STATE_HOME"); s != nullptr && s[0] == '/') {
    return std::string(s) + "/sandgate/runs";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/') {
    return std::string(h) + "/.local/state/sandgate/runs";
  }
  return "";
}

Result<RunDir> createRunDir(const std::optional<std::string>& requested,
                            const WorkspaceId& workspace) {
  std::string path;
  if (requested) {
    path = *requested;
  } else {
    std::string base = defaultRunsDirectory();
    if (base.empty()) {
      return refuse(reason::kRunDirUnusable,
                    "no default place for the run's directory ($HOME and $XDG_STATE_HOME are "
                    "unset): give --run-dir");
    }
    if (!makeDirectories(base, 0700)) {
      return refuse(reason::kRunDirUnusable,
                    fmt::format("cannot create {}: {}", base, std::strerror(errno)));
    }
    // The base is the launcher's user's own (a home directory may be reached through a link,
    // e.g. /home -> /usr/home): resolved once here; nothing below it is followed.
    char real[PATH_MAX];
    if (::realpath(base.c_str(), real) == nullptr) {
      return refuse(reason::kRunDirUnusable,
                    fmt::format("cannot resolve {}: {}", base, std::strerror(errno)));
    }
    path = std::string(real) + "/" + newRunId();
  }
  auto parent = safe_open::openParent(path);
  if (!parent) {
    return refuse(reason::kRunDirUnusable, fmt::format("cannot open the directory of {}: {}", path,
                                                       safe_open::describeError(errno)));
  }
  int within = safe_open::isWithin(parent->dir.get(), workspace.dev, workspace.ino);
  if (within != 0) {
    return refuse(reason::kRunDirInWorkspace,
                  fmt::format("{} is inside the workspace {}: put the run's directory outside "
                              "it (the sandbox can write there)",
                              path, workspace.path));
  }
  if (::mkdirat(parent->dir.get(), parent->name.c_str(), 0700) != 0) {
    return refuse(reason::kRunDirUnusable,
                  fmt::format("cannot create {}: {}{}", path, std::strerror(errno),
                              errno == EEXIST ? " (a run's directory must be new)" : ""));
  }
  RunDir dir;
  dir.fd.reset(safe_open::openBeneath(parent->dir.get(), parent->name, O_RDONLY | O_DIRECTORY));
  if (!dir.fd.valid() || ::fchmod(dir.fd.get(), 0700) != 0) {
    return refuse(reason::kRunDirUnusable, fmt::format("cannot open {}: {}", path,
                                                       safe_open::describeError(errno)));
  }
  dir.id = parent->name;
  dir.path = sandbox::descriptorPath(dir.fd.get());
  if (::mkdirat(dir.fd.get(), bundle::kOverlay, 0700) != 0) {
    return refuse(reason::kRunDirUnusable,
                  fmt::format("cannot create {}/{}: {}", path, bundle::kOverlay,
                              std::strerror(errno)));
  }
  return dir;
}

Result<RunDir> openRunDir(const std::string& run) {
  std::string path = run;
  if (run.find('/') == std::string::npos) {
    std::string base = defaultRunsDirectory();
    if (run.empty() || run == "." || run == ".." || base.empty()) {
      return refuse(reason::kNoSuchRun, fmt::format("no run {}", run));
    }
    char real[PATH_MAX];
    path = (::realpath(base.c_str(), real) ? std::string(real) : base) + "/" + run;
  }
  RunDir dir;
  dir.fd.reset(safe_open::openNoSymlinks(path, O_RDONLY | O_DIRECTORY));
  if (!dir.fd.valid()) {
    return refuse(reason::kNoSuchRun,
                  fmt::format("no run {} ({}: {})", run, path, safe_open::describeError(errno)));
  }
  // Both files every run's directory has from its start: `discard` removes what it opens, and
  // must not take any directory for a run.
  struct stat audit {}, overlay {};
  if (::fstatat(dir.fd.get(), bundle::kAudit, &audit, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISREG(audit.st_mode) ||
      ::fstatat(dir.fd.get(), bundle::kOverlay, &overlay, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISDIR(overlay.st_mode)) {
    return refuse(reason::kNoSuchRun, fmt::format("{} is not a run's directory", path));
  }
  dir.path = sandbox::descriptorPath(dir.fd.get());
  dir.id = dir.path.substr(dir.path.rfind('/') + 1);
  return dir;
}

std::vector<std::string> listRunIds() {
  std::vector<std::string> ids;
  std::string base = defaultRunsDirectory();
  if (base.empty()) return ids;
  DIR* d = ::opendir(base.c_str());
  if (d == nullptr) return ids;
  for (int i = 0; i < 100000; ++i) {
    dirent* e = ::readdir(d);
    if (e == nullptr) break;
    if (e->d_name[0] != '.' && e->d_type == DT_DIR) ids.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::optional<std::string> removeRunDir(const RunDir& dir) {
  // The directory as it was opened, by its parent and name: nothing on the way is followed,
  // and a link the workload left in its upper layer is removed, never followed.
  auto parent = safe_open::openParent(dir.path);
  if (!parent) return fmt::format("cannot open the directory of {}: {}", dir.path, std::strerror(errno));
  struct stat st {}, opened {};
  if (::fstatat(parent->dir.get(), parent->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      ::fstat(dir.fd.get(), &opened) != 0 || st.st_dev != opened.st_dev ||
      st.st_ino != opened.st_ino) {
    return fmt::format("{} is no longer the run's directory that was opened", dir.path);
  }
  if (auto e = sandbox::removeLayerEntry(parent->dir.get(), parent->name); !e.empty()) {
    return fmt::format("cannot remove {}: {}", dir.path, e);
  }
  return std::nullopt;
}

}  // namespace sandgate::run
