// File, environment and command sources for secrets (see source.h for the guarantees).
#include "broker/source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/absolute_names.h"

namespace sandgate::broker {

namespace {

std::string errnoText(int err) { return std::strerror(err); }

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace

Fetched finishSecret(std::string& raw, bool multiLine) {
  if (multiLine) {
    if (raw.empty()) return {nullptr, "it is empty"};
    return {Secret::take(raw), {}};
  }
  trimTrailingNewline(raw);
  if (auto why = checkSecretBytes(raw)) {
    wipe(raw);
    return {nullptr, *why};
  }
  return {Secret::take(raw), {}};
}

// ---- file -------------------------------------------------------------------------------

bool FileSource::Identity::operator==(const Identity& o) const {
  return dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
         mtime.tv_nsec == o.mtime.tv_nsec && ctime.tv_sec == o.ctime.tv_sec &&
         ctime.tv_nsec == o.ctime.tv_nsec;
}

FileSource::Identity FileSource::identityOf(const struct stat& st) {
  return Identity{st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
}

namespace {

std::atomic<size_t> gUnwatched{0};

}  // namespace

size_t unwatchedFileSources() { return gUnwatched.load(std::memory_order_relaxed); }

FileSource::FileSource(std::string path, bool multiLine)
    : path_(path), multiLine_(multiLine), watch_(std::move(path)) {}

FileSource::~FileSource() {
  if (unwatched_) gUnwatched.fetch_sub(1, std::memory_order_relaxed);
}

Fetched FileSource::read(Identity* identity) const {
  // O_NONBLOCK: a FIFO put in place of the secret must not hang the request that reads it.
  Fd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (fd.get() < 0) return {nullptr, fmt::format("cannot open {}: {}", path_, errnoText(errno))};
  struct stat before {};
  if (::fstat(fd.get(), &before) != 0) {
    return {nullptr, fmt::format("cannot stat {}: {}", path_, errnoText(errno))};
  }
  if (!S_ISREG(before.st_mode)) return {nullptr, fmt::format("{} is not a regular file", path_)};
  if (static_cast<uint64_t>(before.st_size) > kMaxSecretBytes) {
    return {nullptr, fmt::format("{} is larger than {} bytes", path_, kMaxSecretBytes)};
  }
  std::string raw;
  raw.reserve(kMaxSecretBytes + 1);  // no reallocation: no stray copies of the bytes in freed heap
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      OPENSSL_cleanse(buf, sizeof buf);
      wipe(raw);
      return {nullptr, fmt::format("cannot read {}: {}", path_, errnoText(err))};
    }
    if (n == 0) break;
    if (raw.size() + static_cast<size_t>(n) > kMaxSecretBytes) {
      OPENSSL_cleanse(buf, sizeof buf);
      wipe(raw);
      return {nullptr, fmt::format("{} is larger than {} bytes", path_, kMaxSecretBytes)};
    }
    raw.append(buf, static_cast<size_t>(n));
  }
  OPENSSL_cleanse(buf, sizeof buf);
  struct stat after {};
  if (::fstat(fd.get(), &after) != 0 || !(identityOf(before) == identityOf(after))) {
    // Written while we read it: what we have may be half old, half new.
    wipe(raw);
    return {nullptr, fmt::format("{} changed while it was read", path_)};
  }
  *identity = identityOf(after);
  return finishSecret(raw, multiLine_);
}

Fetched FileSource::get() {
  constexpr auto kRecheckEvery = std::chrono::seconds(1);
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  bool changed = false;  // an event said so: read again even if stat(2) looks the same
  if (loaded_) {
    switch (watch_.poll()) {
      case PathWatch::State::kQuiet:
        if (now < recheckAt_) return current_;
        break;
      case PathWatch::State::kChanged:
        changed = true;
        break;
      case PathWatch::State::kUnavailable:
        break;
    }
  }
  // Watches first: a change from here on is an event for a later get().
  const bool unwatched = watch_.arm() == PathWatch::State::kUnavailable;
  if (unwatched != unwatched_) {  // the mode changed: say so once
    unwatched_ = unwatched;
    if (unwatched) {
      gUnwatched.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn(
          "credential file {}: changes cannot be watched ({}); checking it with stat(2) on "
          "every request instead, and trying to watch again every second",
          path_, watch_.failure());
    } else {
      gUnwatched.fetch_sub(1, std::memory_order_relaxed);
      spdlog::info("credential file {}: changes are watched again", path_);
    }
  }
  recheckAt_ = now + kRecheckEvery;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    // Gone (revoked, or mid-rotation): fail closed now and re-read once it is back.
    loaded_ = false;
    current_ = {nullptr, fmt::format("cannot stat {}: {}", path_, errnoText(errno))};
    return current_;
  }
  if (loaded_ && !changed && identityOf(st) == identity_) return current_;
  // A writer racing with us is retried a few times; after that the request fails closed and
  // the next one tries again.
  for (int attempt = 0; attempt < 3; ++attempt) {
    Identity id;
    current_ = read(&id);
    if (current_.ok() || current_.error.find("changed while") == std::string::npos) {
      identity_ = id;
      // A file with bad contents keeps its error until it changes; an unreadable one is
      // retried on the next get().
      loaded_ = id.size >= 0;
      return current_;
    }
  }
  loaded_ = false;
  return current_;
}

// ---- env --------------------------------------------------------------------------------

Fetched readEnv(const std::string& name, bool multiLine) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return {nullptr, fmt::format("environment variable {} is not set", name)};
  std::string raw(v);
  return finishSecret(raw, multiLine);
}

// ---- exec -------------------------------------------------------------------------------

namespace {

// stderr as it may appear in an error message: printable ASCII, one line, bounded.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : ' ';
  }
  size_t b = out.find_first_not_of(' ');
  size_t e = out.find_last_not_of(' ');
  if (b == std::string::npos) return {};
  out = out.substr(b, e - b + 1);
  if (out.size() > 300) out = out.substr(0, 300) + "...";
  return out;
}

struct Spawned {
  pid_t pid = -1;
  std::string error;
};

Spawned spawn(const std::vector<std::string>& argv, int outFd, int errFd) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, outFd, 1);
  posix_spawn_file_actions_adddup2(&actions, errFd, 2);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  // The proxy ignores SIGPIPE; ignored signals survive exec, and a helper should not inherit
  // that (or any handler-less disposition we changed).
  posix_spawnattr_setsigdefault(&attr, &all);
  // Its own process group, so a timeout kills helpers it started too.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  Spawned out;
  // The environment the proxy started with: its own resolves names as given (LOCALDOMAIN, see
  // common/absolute_names.h), a helper resolves as its operator's system does.
  bool searchPath = argv[0].find('/') == std::string::npos;
  int rc = searchPath ? posix_spawnp(&out.pid, args[0], &actions, &attr, args.data(),
                                     absolute_names::startEnvironment())
                      : posix_spawn(&out.pid, args[0], &actions, &attr, args.data(),
                                    absolute_names::startEnvironment());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    out.pid = -1;
    out.error = fmt::format("cannot run {}: {}", argv[0], errnoText(rc));
  }
  return out;
}

void killAndReap(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

Fetched runExec(const std::vector<std::string>& argv, const ExecLimits& limits,
                std::stop_token stop, const Secret* previous) {
  if (argv.empty() || argv[0].empty()) return {nullptr, "exec source has no command"};
  const std::string& cmd = argv[0];
  int outPipe[2], errPipe[2];
  if (::pipe2(outPipe, O_CLOEXEC) != 0) {
    return {nullptr, fmt::format("cannot run {}: pipe: {}", cmd, errnoText(errno))};
  }
  Fd outRead(outPipe[0]), outWrite(outPipe[1]);
  if (::pipe2(errPipe, O_CLOEXEC) != 0) {
    return {nullptr, fmt::format("cannot run {}: pipe: {}", cmd, errnoText(errno))};
  }
  Fd errRead(errPipe[0]), errWrite(errPipe[1]);
  Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (wake.get() < 0) {
    return {nullptr, fmt::format("cannot run {}: eventfd: {}", cmd, errnoText(errno))};
  }
  std::stop_callback onStop(stop, [fd = wake.get()] {
    uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
  });

  Spawned child = spawn(argv, outWrite.get(), errWrite.get());
  outWrite.reset();
  errWrite.reset();
  if (child.pid < 0) return {nullptr, child.error};

  const auto deadline = std::chrono::steady_clock::now() + limits.timeout;
  std::string out;
  out.reserve(limits.maxOutput + 1);  // never reallocated: no stray copies in freed heap
  std::string err;
  std::string failure;
  bool outOpen = true, errOpen = true;
  char buf[4096];
  auto remainingMs = [&] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return static_cast<int>(std::max<int64_t>(0, left.count()));
  };
  while ((outOpen || errOpen) && failure.empty()) {
    pollfd fds[3] = {{outOpen ? outRead.get() : -1, POLLIN, 0},
                     {errOpen ? errRead.get() : -1, POLLIN, 0},
                     {wake.get(), POLLIN, 0}};
    int ms = remainingMs();
    if (ms == 0) {
      failure = fmt::format("{} did not finish within {} ms", cmd, limits.timeout.count());
      break;
    }
    int n = ::poll(fds, 3, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      failure = fmt::format("cannot run {}: poll: {}", cmd, errnoText(errno));
      break;
    }
    if (fds[2].revents) {
      failure = fmt::format("{} was stopped (credential store shutting down)", cmd);
      break;
    }
    if (fds[0].revents) {
      ssize_t r = ::read(outRead.get(), buf, sizeof buf);
      if (r <= 0 && !(r < 0 && errno == EINTR)) {
        outOpen = false;
      } else if (r > 0) {
        if (out.size() + static_cast<size_t>(r) > limits.maxOutput) {
          failure = fmt::format("{} wrote more than {} bytes", cmd, limits.maxOutput);
        } else {
          out.append(buf, static_cast<size_t>(r));
        }
      }
    }
    if (fds[1].revents) {
      ssize_t r = ::read(errRead.get(), buf, sizeof buf);
      if (r <= 0 && !(r < 0 && errno == EINTR)) {
        errOpen = false;
      } else if (r > 0 && err.size() < limits.maxStderr) {
        err.append(buf, std::min(static_cast<size_t>(r), limits.maxStderr - err.size()));
      }
    }
  }
  OPENSSL_cleanse(buf, sizeof buf);

  int status = 0;
  bool reaped = false;
  // Both pipes are closed: the command is exiting. Wait for it, still bounded by the deadline.
  while (failure.empty()) {
    pid_t r = ::waitpid(child.pid, &status, WNOHANG);
    if (r == child.pid) {
      reaped = true;
      break;
    }
    if (r < 0 && errno != EINTR) {
      failure = fmt::format("cannot run {}: waitpid: {}", cmd, errnoText(errno));
      break;
    }
    int ms = remainingMs();
    if (ms == 0) {
      failure = fmt::format("{} did not finish within {} ms", cmd, limits.timeout.count());
      break;
    }
    pollfd wakeFd{wake.get(), POLLIN, 0};
    if (::poll(&wakeFd, 1, std::min(ms, 10)) > 0) {
      failure = fmt::format("{} was stopped (credential store shutting down)", cmd);
    }
  }
  if (!reaped) killAndReap(child.pid);

  if (failure.empty()) {
    if (WIFSIGNALED(status)) {
      failure = fmt::format("{} was killed by signal {}", cmd, WTERMSIG(status));
    } else if (WEXITSTATUS(status) != 0) {
      failure = fmt::format("{} exited with status {}", cmd, WEXITSTATUS(status));
      // stderr explains most failures, but a helper may echo its token there. It is shown
      // only when nothing was written to stdout (no secret to repeat) and it does not contain
      // the secret we held before.
      bool mayRepeat = !out.empty() ||
                       // reveal(): compared against stderr, which is then withheld, not shown.
                       (previous && err.find(previous->reveal()) != std::string::npos);
      std::string shown = printable(err);
      if (mayRepeat && !err.empty()) {
        failure += " (stderr withheld: it could contain the secret)";
      } else if (!shown.empty()) {
        failure += ": " + shown;
      }
    }
  }
  wipe(err);
  if (!failure.empty()) {
    wipe(out);
    return {nullptr, std::move(failure)};
  }
  Fetched f = finishSecret(out, limits.multiLine);
  if (!f.ok()) f.error = fmt::format("output of {}: {}", cmd, f.error);
  return f;
}

}  // namespace sandgate::broker
