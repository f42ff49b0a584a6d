// `listen.admin`: the Unix socket through which `sandgate run --proxy unix:PATH` hands a
// sandbox's listeners (and its transparent capture) to a running server (protocol in
// admin_protocol.h). One thread, poll().
//
// Where: under /run/sandgate (config/ refuses listen.admin elsewhere), which no sandbox can see:
// each has a private /run. The socket's directory must be a real directory that only its
// owner (root or serve's user) can write; /run/sandgate is created if missing.
//
// Access: the socket file is 0600 (root only), or 0660 and owned by `listen.admin_group`; and
// every connection's peer must be root or hold that group, by the credentials the kernel
// recorded at connect() (SO_PEERCRED, SO_PEERGROUPS; never /etc/group for its uid), so that a
// socket whose mode was loosened by hand, or a descriptor passed on, grants nothing more. A
// task with `admin_groups` further needs one of them.
//
// What is adopted must be what a sandbox hands over: listeners on loopback (the DNS stub's
// sockets too), all from one network namespace that is not serve's own.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/config.h"
#include "proxy/admin/admin_protocol.h"
#include "proxy/state/admin_groups.h"

namespace sandgate::broker {
class PlaceholderSet;
}

namespace sandgate::proxy {

class ListenerTally;

// A task_env reply and the run placeholders it names, which the connection keeps for what it
// adopts next (never sent: the reply carries their values).
struct RunEnvironment {
  TaskEnvironment reply;
  std::shared_ptr<const broker::PlaceholderSet> placeholders;
};

// What the admin socket asks of the server.
struct AdminBackend {
  // Every Error::reason is an admin_reason token (unknown_task, unavailable, ...): the reply's.
  // task_env: a new run's environment, with placeholders of its own.
  std::function<Expected<RunEnvironment>(const std::string& task)> environment;
  // token_env: the environment of the task's token clients (see admin_protocol.h).
  std::function<Expected<TaskEnvironment>(const std::string& task)> tokenEnvironment;
  // Serves `fds` (owned: closed on error too) for `task`, counting into `tally`, honouring
  // `placeholders` (the run's, from its task_env; null: none); returns a handle for release.
  std::function<Expected<uint64_t>(std::vector<int> fds, const std::string& task,
                                   std::shared_ptr<ListenerTally> tally,
                                   std::shared_ptr<const broker::PlaceholderSet> placeholders)>
      adopt;
  // adopt_capture: serves a sandbox's DNS stub sockets and capture listeners (owned: closed on
  // error too) with `options`, counting into `tally`, honouring `placeholders` as for adopt.
  // The group is a handle for release.
  std::function<Expected<AdoptedCapture>(
      CaptureSockets sockets, CaptureOptions options, std::shared_ptr<ListenerTally> tally,
      std::shared_ptr<const broker::PlaceholderSet> placeholders)>
      adoptCapture;
  // Closes what an adopt or adopt_capture handle holds (connections already accepted go on).
  std::function<void(uint64_t handle)> release;
  // The gids of the task's admin_groups, nullopt when it has none (or no such task). Unset:
  // no task has any.
  std::function<std::optional<std::vector<gid_t>>(const std::string& task)> taskGroups;
  // on_unknown: ask (admin_questions.h): the questions waiting, and an answer to one of them
  // by `who` (an "always" answer is written to the task's approvals file first). Unset: this
  // server asks nothing.
  std::function<std::vector<QuestionInfo>()> questions;
  std::function<Expected<QuestionInfo>(uint64_t id, AnswerKind answer, const Decider& who)>
      answer;
};

struct AdminSocketOptions {
  std::string path;
  std::optional<gid_t> group;  // listen.admin_group, resolved
  size_t maxConnections = 64;  // beyond this, a new connection is refused with `unavailable`
  // On release, how long to wait for the run's connections to finish before summing them.
  std::chrono::milliseconds releaseWait{2000};
};

class AdminSocket {
 public:
  // Creates the socket file and listens (connections wait until start()). Refuses a path
  // where another server answers or that is not a socket; replaces a stale socket (nobody
  // listening). Errors name the path and errno.
  static Result<std::unique_ptr<AdminSocket>> open(AdminSocketOptions options,
                                                   AdminBackend backend);
  ~AdminSocket();
  AdminSocket(const AdminSocket&) = delete;
  AdminSocket& operator=(const AdminSocket&) = delete;

  void start();  // serves on its own thread
  // Stops serving, releases everything adopted, closes the connections and removes the
  // socket file (if it is still ours). Idempotent; thread-safe with respect to start().
  void stop();

  const std::string& path() const;

  struct Impl;

 private:
  explicit AdminSocket(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sandgate::proxy
