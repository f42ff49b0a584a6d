// The launcher's end of the admin socket (see admin_client.h).
#include "proxy/admin/admin_client.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <span>

#include "common/fd_passing.h"

namespace sandgate::proxy {

namespace {

// A failure without a reason token: the connection, not serve, failed.
Error failure(std::string message) { return Error{"", std::move(message)}; }

// Call, path and errno; read errno before anything else can change it.
Error sysError(const char* call, const std::string& path) {
  int e = errno;
  std::string hint;
  if (e == EAGAIN) hint = "; no reply in time";
  if (e == EPROTOTYPE) hint = "; not a sandgate admin socket";
  return failure(fmt::format("{} {}: {} (errno {}{})", call, path, std::strerror(e), e, hint));
}

}  // namespace

Expected<std::unique_ptr<AdminClient>> AdminClient::connect(const std::string& path,
                                                            std::chrono::milliseconds timeout) {
  sockaddr_un a{};
  if (path.empty() || path.size() >= sizeof(a.sun_path)) {
    return failure(fmt::format("'{}' cannot be a unix socket path", path));
  }
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return sysError("socket for", path);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    auto err = sysError("connect to", path);
    ::close(fd);
    return err;
  }
  return std::unique_ptr<AdminClient>(new AdminClient(fd, path));
}

AdminClient::~AdminClient() { ::close(fd_); }

Expected<AdminReply> AdminClient::exchange(const AdminRequest& request,
                                           const std::vector<int>& fds) {
  if (fds.size() > kMaxAdminFds) {
    return failure(fmt::format("at most {} descriptors per message", kMaxAdminFds));
  }
  std::string bytes = encodeRequest(request);
  iovec iov{bytes.data(), bytes.size()};
  ssize_t n = fd_passing::sendWithFds(fd_, std::span<iovec>(&iov, 1), fds);
  std::vector<char> buf(kMaxAdminMessage + 1);
  if (n != static_cast<ssize_t>(bytes.size())) {
    // A server that refuses a peer (permission, too many connections) answers at once and
    // closes: its reason is waiting to be read, and says more than EPIPE.
    auto err = sysError("send to", path_);
    n = ::recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n <= 0) return err;
  } else {
    do {
      n = ::recv(fd_, buf.data(), buf.size(), 0);
    } while (n < 0 && errno == EINTR);
  }
  if (n < 0) return sysError("receive from", path_);
  if (n == 0) return failure(fmt::format("{}: the server closed the connection", path_));
  auto reply = parseReply(std::string_view(buf.data(), static_cast<size_t>(n)));
  if (!reply) {
    return failure(fmt::format("{}: bad reply: {}", path_, reply.error().message));
  }
  if (!reply->ok) return Error{reply->reason, reply->error};
  return std::move(reply.value());
}

namespace {

const char* envOpName(AdminOp op) { return op == AdminOp::kTaskEnv ? "task_env" : "token_env"; }

}  // namespace

Expected<TaskEnvironment> AdminClient::environment(AdminOp op, const std::string& task,
                                                   const std::string& run) {
  AdminRequest req{op, task};
  req.run = run;
  auto r = exchange(req, {});
  if (!r) return r.error();
  if (!r->environment) {
    return failure(fmt::format("{}: {} reply without an environment", path_, envOpName(op)));
  }
  return std::move(*r->environment);
}

Expected<TaskEnvironment> AdminClient::taskEnvironment(const std::string& task,
                                                       const std::string& run) {
  return environment(AdminOp::kTaskEnv, task, run);
}

Expected<TaskEnvironment> AdminClient::tokenEnvironment(const std::string& task) {
  return environment(AdminOp::kTokenEnv, task, {});
}

Expected<void> AdminClient::adopt(const std::string& task, const std::vector<int>& fds) {
  auto r = exchange(AdminRequest{AdminOp::kAdopt, task}, fds);
  if (!r) return r.error();
  return {};
}

Expected<void> AdminClient::adoptCapture(const std::string& task,
                                         const std::vector<uint16_t>& ports, bool ipv6, int dnsUdp,
                                         int dnsTcp, const std::vector<int>& listeners) {
  AdminRequest req(AdminOp::kAdoptCapture, task);
  req.ports = ports;
  req.ipv6 = ipv6;
  std::vector<int> fds = {dnsUdp, dnsTcp};
  fds.insert(fds.end(), listeners.begin(), listeners.end());
  auto r = exchange(req, fds);
  if (!r) return r.error();
  return {};
}

Expected<ReleaseSummary> AdminClient::release() {
  auto r = exchange(AdminRequest{AdminOp::kRelease, ""}, {});
  if (!r) return r.error();
  return ReleaseSummary{r->traffic.value_or(TrafficSummary{}), r->dns};
}

Expected<std::vector<QuestionInfo>> AdminClient::questions() {
  auto r = exchange(AdminRequest{AdminOp::kQuestions, ""}, {});
  if (!r) return r.error();
  return r->questions.value_or(std::vector<QuestionInfo>{});
}

Expected<QuestionInfo> AdminClient::answer(uint64_t id, const std::string& answer) {
  AdminRequest req{AdminOp::kAnswer, ""};
  req.questionId = id;
  req.answer = answer;
  auto r = exchange(req, {});
  if (!r) return r.error();
  if (!r->questions || r->questions->size() != 1) {
    return failure(fmt::format("{}: answer reply without the question answered", path_));
  }
  return r->questions->front();
}

}  // namespace sandgate::proxy
