// Reading one secret from where the config says it lives: a file, an environment variable of
// sandgate itself, or the standard output of a command.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

#include "broker/path_watch.h"
#include "broker/secret.h"

namespace sandgate::broker {

// Larger values are refused rather than read: no credential is this big, and a bound keeps a
// wrong path (a log file, /dev/zero) from growing memory.
inline constexpr size_t kMaxSecretBytes = 64 * 1024;

// One attempt to obtain a secret: the value, or why there is none. `error` never quotes the
// secret or a command's standard output.
struct Fetched {
  std::shared_ptr<const Secret> secret;
  std::string error;

  bool ok() const { return secret != nullptr; }
};

// A secret file (e.g. a mounted Kubernetes Secret), kept current without a restart. Changes are
// noticed through inotify (PathWatch: the file and every directory entry and symbolic link on
// the way to it, so Kubernetes' `..data` link swap counts), so that get() costs one read(2)
// when nothing changed and the next request after a rotation reads the new value. Every
// second, and on every get() where inotify is unavailable, a stat(2) backs it up: a different
// device, inode, size, mtime or ctime makes it re-read too. Thread-safe.
//
// Without inotify (no instance or watch left under the kernel's limits, a directory it may not
// watch) the source still works, at the cost of a stat(2) per get(): a degraded mode, logged at
// warn when it starts (with the reason) and at info when a watch is placed again (retried every
// second), and counted in unwatchedFileSources().
class FileSource {
 public:
  // `multiLine`: a PEM key and the like, kept as read (no header-safety check of its bytes).
  explicit FileSource(std::string path, bool multiLine = false);
  ~FileSource();
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  Fetched get();

 private:
  struct Identity {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = -1;
    timespec mtime{};
    timespec ctime{};
    bool operator==(const Identity& o) const;
  };
  static Identity identityOf(const struct stat& st);
  Fetched read(Identity* identity) const;

  std::string path_;
  bool multiLine_ = false;
  std::mutex mu_;
  bool loaded_ = false;
  Identity identity_;
  Fetched current_;
  PathWatch watch_;
  bool unwatched_ = false;                             // counted in unwatchedFileSources()
  std::chrono::steady_clock::time_point recheckAt_{};  // the next stat(2) without an event
};

// How many FileSources, in the whole process, cannot watch their file now (a metric).
size_t unwatchedFileSources();

// Reads sandgate's own environment variable `name` (never the sandbox's).
Fetched readEnv(const std::string& name, bool multiLine = false);

struct ExecLimits {
  std::chrono::milliseconds timeout{10'000};
  size_t maxOutput = kMaxSecretBytes;  // stdout beyond this fails the run
  size_t maxStderr = 4096;             // stderr kept for the error message; the rest is drained
  bool multiLine = false;              // stdout is a PEM key or the like: kept as written
};

// Runs argv (argv[0] a path, or a name looked up in PATH) with posix_spawn: no shell, stdin
// from /dev/null, its own process group, default signal dispositions, bounded output and time.
// The trimmed stdout is the secret. On failure the error names the command and its exit status;
// it includes the captured stderr only when that cannot contain the secret: never on success,
// never when stdout was non-empty, never when it contains `previous`. A stop request kills the
// command at once (the store's destructor must not wait for a slow helper).
Fetched runExec(const std::vector<std::string>& argv, const ExecLimits& limits,
                std::stop_token stop = {}, const Secret* previous = nullptr);

// Trims one newline and validates; returns the protected secret or the reason it is refused.
// Wipes `raw` in every case. `multiLine` (a PEM key, never injected into a header): kept as
// read, refused only when empty.
Fetched finishSecret(std::string& raw, bool multiLine = false);

}  // namespace sandgate::broker
