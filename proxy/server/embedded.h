// The proxy embedded in `sandgate run`: a Server on its own threads with no TCP listener of
// its own (it serves only the sockets a launcher hands over), whose audit lines are copied to
// their destination and tallied for the run's report.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "proxy/capture_server/capture.h"
#include "proxy/observe/traffic.h"
#include "proxy/server/server.h"

namespace sandgate::proxy {

struct EmbeddedOptions {
  unsigned threads = 2;
  // Where the audit lines go: -1 = nowhere but auditCopy; otherwise a descriptor open for
  // appending, taken by create() (closed on error too). The caller opens audit.path, with no
  // link followed and never in the workspace (run/).
  int auditFd = -1;
  // Also each line, with one write(2), to this descriptor, not taken (stderr for
  // --audit-stderr; never the command's stdout); -1: none. One write per line so that another
  // writer of that stream (the command's output, copied) cannot land inside one of ours.
  int streamFd = -1;
  // Given a second copy of every audit line, without its newline (the run's audit.jsonl in its
  // directory, which bounds it), on the audit reader's thread; unset: no copy.
  std::function<void(std::string_view line)> auditCopy;
};

class EmbeddedProxy {
 public:
  // Compiles `config` (its listen.* and audit.path are ignored: the embedded proxy binds
  // nothing on the host). Starts no thread: the launcher forks the sandbox first (see
  // sandbox::StartedCallback), then calls start().
  static Result<std::unique_ptr<EmbeddedProxy>> create(config::Config config,
                                                       EmbeddedOptions options);
  ~EmbeddedProxy();
  EmbeddedProxy(const EmbeddedProxy&) = delete;
  EmbeddedProxy& operator=(const EmbeddedProxy&) = delete;

  // sandgate's CA certificate and the run's placeholders (see Server::sandboxEnvironment);
  // the listeners and capture adopted afterwards for `task` honour those placeholders.
  Result<SandboxEnvironment> sandboxEnvironment(const std::string& task);

  // Serves a listening socket (takes ownership) whose every connection belongs to `task`.
  Result<void> adoptListener(int fd, const std::string& task);

  // Transparent capture of one sandbox (see Server::adoptCapture).
  Result<std::shared_ptr<CaptureContext>> adoptCapture(CaptureSockets sockets,
                                                       CaptureOptions options);

  // on_unknown: ask for `sandgate run --ask` (see Server::onQuestion): new questions go to `f`
  // (on a worker thread: it must not block), answers come back through answerQuestion().
  void onQuestion(std::function<void(const QuestionInfo&)> f);
  Expected<QuestionInfo> answerQuestion(uint64_t id, AnswerKind answer, const Decider& who);

  // Starts the worker threads and the audit reader. Idempotent; sockets adopted before it are
  // served from then on.
  void start();

  // Shuts down (requests in flight finish within limits.shutdown_grace), waits until every
  // audit line has been copied, and returns the tally. Idempotent.
  TrafficSummary stop();

  struct Impl;

 private:
  explicit EmbeddedProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sandgate::proxy
