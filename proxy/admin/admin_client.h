// The launcher's end of the admin socket (`sandgate run --proxy unix:PATH`): blocking
// request/reply over SOCK_SEQPACKET (protocol in admin_protocol.h).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "proxy/admin/admin_protocol.h"

namespace sandgate::proxy {

// What serve says a run did when it releases the run's sockets.
struct ReleaseSummary {
  TrafficSummary traffic;
  std::optional<CaptureCounts> dns;  // after adoptCapture
};

// Errors carry the server's reason token (admin_reason::…) in Error::reason for a refused
// request; the reason is empty for a connection that failed (the message names the system
// call, the path and errno) or a reply that cannot be read.
class AdminClient {
 public:
  // Connects to the admin socket at `path`. Every later call waits at most `timeout`.
  static Expected<std::unique_ptr<AdminClient>> connect(
      const std::string& path, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~AdminClient();
  AdminClient(const AdminClient&) = delete;
  AdminClient& operator=(const AdminClient&) = delete;

  // task_env: a new run's environment (its placeholders hold for what this connection adopts).
  // `run`: the run's id, named in serve's audit lines of what this connection adopts.
  Expected<TaskEnvironment> taskEnvironment(const std::string& task, const std::string& run = {});
  // token_env: the environment of the task's token clients on serve's own listeners.
  Expected<TaskEnvironment> tokenEnvironment(const std::string& task);
  // Hands the listening sockets over (they stay open here: the caller closes its copies).
  Expected<void> adopt(const std::string& task, const std::vector<int>& fds);
  // Hands the transparent capture over: the DNS stub's UDP and TCP sockets and the capture
  // listeners on `ports`; `ipv6`: the sandbox routes and listens on the IPv6 range. Served
  // with the ranges of this connection's taskEnvironment() (call it first). The descriptors
  // stay open here, as for adopt().
  Expected<void> adoptCapture(const std::string& task, const std::vector<uint16_t>& ports,
                              bool ipv6, int dnsUdp, int dnsTcp, const std::vector<int>& listeners);
  // Asks serve to close everything adopted and say what the run's connections (and its DNS
  // stub) did.
  Expected<ReleaseSummary> release();
  // on_unknown: ask (`sandgate approve`): the questions waiting, and an answer ("once", "run",
  // "always" or "deny") to one of them; the reply names the question answered.
  Expected<std::vector<QuestionInfo>> questions();
  Expected<QuestionInfo> answer(uint64_t id, const std::string& answer);

  const std::string& path() const { return path_; }

 private:
  AdminClient(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Expected<AdminReply> exchange(const AdminRequest& request, const std::vector<int>& fds);
  Expected<TaskEnvironment> environment(AdminOp op, const std::string& task,
                                        const std::string& run);

  int fd_;
  std::string path_;
};

}  // namespace sandgate::proxy
