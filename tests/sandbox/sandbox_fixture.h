// Test helpers for the launcher: temp dirs, a fake proxy on the handed-over listeners, and a
// runner that captures the command's output.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/launcher.h"

namespace sandgate::sandbox::testing {

// A directory removed (recursively) at destruction; `base` must be absolute.
class TempDir {
 public:
  explicit TempDir(const std::string& base = "/var/tmp");
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Answers every connection on the handed-over listeners with "HTTP/1.1 200 OK" and a body that
// starts with kMarker, and records each request line. Stops (bounded) at destruction.
class FakeProxy {
 public:
  static constexpr const char* kMarker = "sandgate-fake-proxy-ok";
  FakeProxy() = default;
  ~FakeProxy();
  void adopt(std::vector<int> fds);  // the ListenerCallback
  std::vector<std::string> requests();
  size_t listenerCount();

 private:
  void serve();
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::string> requests_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct Captured {
  Result<RunResult> result;
  std::string out;
  std::string err;
};

// Runs `options` with stdout/stderr captured (memfds) and `proxy` (may be null) as the callback.
Captured runCaptured(Options options, FakeProxy* proxy);

// Options for `sh -c script` in `workspace` with a 60 s safety timeout.
Options shell(const std::string& script, const std::string& workspace);

// Whether the running test process is root.
bool isRoot();

}  // namespace sandgate::sandbox::testing
