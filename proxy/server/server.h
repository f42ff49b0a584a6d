// The proxy server: listeners, one io_context per worker thread, config snapshots swapped
// atomically on reload (SIGHUP or a changed file), graceful shutdown (SIGTERM/SIGINT).
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "proxy/capture_server/capture.h"
#include "proxy/state/questions.h"

namespace sandgate::broker {
class PlaceholderSet;
}

namespace sandgate::proxy {

struct ServerOptions {
  // The file the config came from: reloaded on SIGHUP and when it changes. Empty: the
  // config given to create() is never reloaded.
  std::string configPath;
  unsigned threads = 0;  // 0: the CPUs this process may use (cpu_budget.h)
  // On shutdown, /readyz reports 503 at once but the listeners keep accepting (and
  // connections keep-alive) for this long; then open connections get shutdown_grace to end.
  std::chrono::milliseconds drainDelay{0};
  // The longest a worker polls for more work before it sleeps (see worker_loop.h); zero: it
  // sleeps as soon as it has nothing to do. The spin adapts and stops while the proxy is idle.
  std::chrono::microseconds idleSpin{100};
  // Written (tmp + rename) once the listeners are up:
  // {"proxy":"127.0.0.1:PORT","metrics":"127.0.0.1:PORT"}.
  std::optional<std::string> readyFile;
  // >= 0: the audit lines go to this descriptor (taken by create(), closed with the server;
  // the embedded proxy's pipe) and the config's audit.path is not opened.
  int auditFd = -1;
  bool handleSignals = true;  // SIGHUP reloads, SIGTERM/SIGINT shut down
  // `sandgate serve`: a config with neither listen.proxy nor listen.admin is refused, since no
  // client could ever reach the server (the embedded proxy adopts its listeners instead).
  bool requireClientListener = false;
  bool watchConfigFile = true;
};

// What a sandbox bound to a task needs from the server (see Server::sandboxEnvironment).
struct SandboxEnvironment {
  std::string caPem;
  std::vector<std::pair<std::string, std::string>> variables;
  // The run's placeholders (variables holds those of the credentials its policy names): made
  // for this run alone, honoured only on the listeners it hands over with them.
  std::shared_ptr<const broker::PlaceholderSet> placeholders;
};

class ListenerTally;
struct AdminBackend;

class Server {
 public:
  // Loads and compiles options.configPath, binds `listen.proxy` and `listen.metrics`, opens
  // the audit log. Every problem is a Diagnostic.
  static Result<std::unique_ptr<Server>> create(ServerOptions options);
  // Same with a config already loaded (tests, embedding).
  static Result<std::unique_ptr<Server>> create(config::Config config, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Serves a listening socket whose every connection belongs to `task` (a socket handed
  // over by a sandbox launcher). Takes ownership of `fd`. Callable before or after start().
  // `placeholders` as for adoptListeners.
  Result<void> adoptListener(int fd, std::string task,
                             std::shared_ptr<const broker::PlaceholderSet> placeholders = nullptr);

  // Adopts several listening sockets as one group that releaseListeners() closes again (the
  // admin socket: a sandbox's listeners are served while its launcher stays connected). Takes
  // ownership of `fds` (closed on error too). Connections accepted on them are counted in
  // `tally` when set. Errors: a descriptor that is not a listening TCP socket, shutting down.
  // `capture` set: capture listeners of transparent mode (see adoptCapture).
  // `placeholders`: the run's (sandboxEnvironment()), the only ones its connections honour;
  // null: none at all (a run's connections never honour another run's or the token
  // clients' placeholders).
  Result<uint64_t> adoptListeners(
      std::vector<int> fds, std::string task, std::shared_ptr<ListenerTally> tally = nullptr,
      std::shared_ptr<CaptureContext> capture = nullptr,
      std::shared_ptr<const broker::PlaceholderSet> placeholders = nullptr);
  // Stops accepting on a group's listeners (and, for a capture group, stops its DNS stub) and
  // closes them (connections already accepted go on). Unknown or already released groups are
  // ignored. Thread-safe.
  void releaseListeners(uint64_t group);
  // Transparent capture of one sandbox (takes ownership of every descriptor, closed on error
  // too): serves its DNS stub sockets and its capture listeners, all bound to options.task,
  // sharing one synthetic address pool, as one group that releaseListeners() closes (an
  // embedded proxy never releases it: the server lives as long as the run). The context counts
  // the DNS answers; `tally` as for adoptListeners (the DNS audit records included). Errors: a
  // descriptor of the wrong kind, pool ranges that cannot make a pool, shutting down. Callable
  // before or after start().
  Result<AdoptedCapture> adoptCapture(
      CaptureSockets sockets, CaptureOptions options,
      std::shared_ptr<ListenerTally> tally = nullptr,
      std::shared_ptr<const broker::PlaceholderSet> placeholders = nullptr);

  void start();  // starts worker threads and returns
  void wait();   // blocks until a shutdown has completed
  int run();     // start(), then wait(); returns the exit status (0)

  // Begins a graceful shutdown (thread-safe): stop accepting, let requests in flight finish
  // within limits.shutdown_grace, then close everything.
  void shutdown();

  // Loads and compiles the config file again and swaps it in; a bad file changes nothing
  // and the reason is logged. Thread-safe. Returns whether the new config is in use.
  bool reload();

  // What a sandbox bound to `task` needs to use interception: sandgate's CA certificate (PEM;
  // empty when interception is unavailable) and the placeholder of every credential the
  // task's policy (with its includes) names, as VARIABLE=value pairs. The placeholders are new
  // for every call (one run each): they are honoured only on the listeners adopted with
  // them, and die with the run. Never a secret. Error: no such task.
  Result<SandboxEnvironment> sandboxEnvironment(const std::string& task);
  // The same for the token clients of `task` on serve's own listeners: their placeholders,
  // one set per task for the server's life, shared with no run.
  Result<SandboxEnvironment> tokenClientEnvironment(const std::string& task);

  // on_unknown: ask without the admin socket (`sandgate run --ask`): `f` is called (on a worker
  // thread: it must not block) for each new question, and answerQuestion() answers one as
  // `who` (an "always" answer writes the approvals file first, as the admin socket's does).
  void onQuestion(std::function<void(const QuestionInfo&)> f);
  Expected<QuestionInfo> answerQuestion(uint64_t id, AnswerKind answer, const Decider& who);

  // Bound addresses ("127.0.0.1:3128"), when those listeners exist.
  std::optional<std::string> proxyAddress() const;
  std::optional<std::string> metricsAddress() const;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  AdminBackend adminBackend();  // listen.admin's view of this server
  std::unique_ptr<Impl> impl_;
};

}  // namespace sandgate::proxy
