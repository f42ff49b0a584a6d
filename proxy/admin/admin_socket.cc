// The admin socket: file creation and permissions, peer checks, one poll() thread serving
// task_env / adopt / adopt_capture / release (see admin_socket.h).
#include "proxy/admin/admin_socket.h"

#include "proxy/admin/admin_questions.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <span>
#include <thread>

#include "common/fd_passing.h"
#include "config/config.h"
#include "policy/ip.h"
#include "proxy/observe/listener_tally.h"

namespace sandgate::proxy {

namespace {

Diagnostic sysError(const std::string& path, const char* what) {
  return Diagnostic{"", 0, 0, "listen.admin",
                    fmt::format("{} {}: {} (errno {})", what, path, std::strerror(errno), errno)};
}

sockaddr_un unixAddress(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), std::min(path.size(), sizeof(a.sun_path) - 1));
  return a;
}

// Is someone accepting on the socket at `path`? (A stale socket refuses the connection.)
bool someoneListens(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  auto a = unixAddress(path);
  bool yes = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 ||
             (errno != ECONNREFUSED && errno != ENOENT && errno != EPROTOTYPE);
  ::close(fd);
  return yes;
}

// Makes sure the directory the socket goes in is what it looks like: every component a real
// directory (a symbolic link could move the socket, and the mode set on it, elsewhere), the
// last one owned by root or us and writable by nobody else (who could replace the socket).
// Under kAdminSocketDir, missing directories are created (0755): /run is a tmpfs on most
// hosts, emptied at boot.
std::optional<Diagnostic> prepareDirectory(const std::string& path) {
  auto fail = [&](std::string message) {
    return Diagnostic{"", 0, 0, "listen.admin", std::move(message)};
  };
  const std::string base(config::kAdminSocketDir);
  std::string dir = path.substr(0, path.rfind('/'));
  int fd = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sysError("/", "cannot open");
  std::string at;
  for (size_t pos = 1; pos <= dir.size();) {
    size_t slash = dir.find('/', pos);
    if (slash == std::string::npos) slash = dir.size();
    std::string name = dir.substr(pos, slash - pos);
    pos = slash + 1;
    if (name.empty()) continue;
    at += "/" + name;
    bool created = false;
    int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && errno == ENOENT && (at == base || at.starts_with(base + "/"))) {
      if (::mkdirat(fd, name.c_str(), 0755) == 0) {
        created = true;
      } else if (errno != EEXIST) {  // EEXIST: another serve made it meanwhile
        ::close(fd);
        return sysError(at, "cannot create");
      }
      next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    int err = errno;
    ::close(fd);
    if (next < 0) {
      errno = err;
      if (err == ENOTDIR || err == ELOOP) {
        return fail(fmt::format("{} is not a directory (a symbolic link is refused too)", at));
      }
      return sysError(at, "cannot open");
    }
    fd = next;
    if (created) {
      if (::fchmod(fd, 0755) != 0) {  // whatever the umask made of it
        ::close(fd);
        return sysError(at, "cannot chmod");
      }
      spdlog::info("admin socket: created {}", at);
    }
  }
  struct stat st {};
  int rc = ::fstat(fd, &st);
  ::close(fd);
  if (rc != 0) return sysError(dir, "cannot stat");
  if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
    return fail(
        fmt::format("{} belongs to uid {}, who could replace the socket; it must belong "
                    "to root or to serve's own user",
                    dir, st.st_uid));
  }
  if (st.st_mode & 022) {
    return fail(
        fmt::format("{} is writable by others than its owner (mode {:04o}), who could "
                    "replace the socket; chmod go-w it",
                    dir, st.st_mode & 07777));
  }
  return std::nullopt;
}

struct Connection {
  int fd = -1;
  PeerCredentials peer;
  std::vector<uint64_t> handles;         // adopted listener and capture groups
  std::shared_ptr<ListenerTally> tally;  // created by the first adopt or adopt_capture
  // What this connection's last task_env said about capture: the ranges the launcher routes
  // in the sandbox, and so the pools adopt_capture serves (a reload in between changes
  // nothing for this run).
  std::optional<CaptureOffer> offer;
  // The placeholders of this connection's run (its last task_env) and their task: what it
  // adopts for that task honours them, and nothing else does. Dropped with the connection.
  std::shared_ptr<const broker::PlaceholderSet> placeholders;
  std::string placeholdersTask;
  std::string run;  // its last task_env's run id: the audit lines of what it adopts name it
  std::shared_ptr<CaptureContext> capture;  // adopted: its DNS counts go into release's reply
  // The network namespace of what this connection adopted first: the rest must come from it.
  std::optional<NetnsId> netns;
  // Set for a refused peer: the answer to its first request, after which it is closed. Not
  // sent at once: closing with its request unread would reset the connection, and the
  // launcher would see ECONNRESET instead of the reason.
  std::optional<AdminReply> refusal;
  // A release waiting for the run's last sessions to finish their audit records: its reply
  // (without the traffic yet) and until when it waits. The serving thread goes on serving
  // the other launchers meanwhile.
  std::optional<AdminReply> pendingRelease;
  std::chrono::steady_clock::time_point releaseDeadline;
};

}  // namespace

struct AdminSocket::Impl {
  AdminSocketOptions options;
  AdminBackend backend;
  int listenFd = -1;
  int wakeFd = -1;
  NetnsId serveNetns;    // no adopted socket may live in it
  struct stat bound {};  // the socket file we created: removed on stop only if still this one
  std::thread thread;
  std::mutex stopMu;
  bool stopped = false;
  std::vector<Connection> connections;  // serving thread only
  std::vector<char> buffer = std::vector<char>(kMaxAdminMessage + 1);

  ~Impl() {
    if (listenFd >= 0) ::close(listenFd);
    if (wakeFd >= 0) ::close(wakeFd);
  }

  bool send(Connection& c, const AdminReply& reply) {
    std::string bytes = encodeReply(reply);
    // A launcher that does not read its replies loses its connection; it never blocks us.
    return ::send(c.fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

  void acceptAll() {
    while (true) {
      int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN)
          spdlog::warn("admin socket {}: accept: {}", options.path, std::strerror(errno));
        return;
      }
      Connection c;
      c.fd = fd;
      auto peer = peerCredentials(fd);
      if (!peer) {
        spdlog::warn("admin socket {}: {}", options.path, peer.errorText());
        ::close(fd);
        continue;
      }
      c.peer = std::move(peer.value());
      if (auto refused = checkPeer(c.peer, options.group)) {
        spdlog::warn("admin socket {}: refused: {}", options.path, *refused);
        c.refusal = errorReply(admin_reason::kPermissionDenied, "permission denied: " + *refused);
      } else if (connections.size() >= options.maxConnections) {
        spdlog::warn("admin socket {}: {} connections open; refusing pid {}", options.path,
                     connections.size(), c.peer.pid);
        c.refusal = errorReply(
            admin_reason::kUnavailable,
            fmt::format("too many admin connections (limit {})", options.maxConnections));
      }
      if (connections.size() >= 2 * options.maxConnections) {
        ::close(fd);  // refused ones too: nothing may grow without bound
        continue;
      }
      connections.push_back(std::move(c));
    }
  }

  // Release: closes what the connection adopted; the reply, which says what the run did, is
  // sent by finishRelease(). The sandbox is gone by now, so its connections end at their next
  // read or write; their last audit records get a bounded moment (releaseWait) to arrive.
  void startRelease(Connection& c) {
    for (uint64_t h : c.handles) backend.release(h);
    c.handles.clear();
    c.placeholders.reset();  // the run is over: its placeholders go with it
    AdminReply r;
    r.ok = true;
    r.traffic = TrafficSummary{};
    if (c.capture) r.dns = c.capture->counts();
    c.capture.reset();
    c.pendingRelease = std::move(r);
    c.releaseDeadline = std::chrono::steady_clock::now() + options.releaseWait;
  }

  // Sends the release reply once the run's sessions have finished or the wait is over.
  void finishRelease(Connection& c) {
    if (c.tally && c.tally->activeSessions() > 0 &&
        std::chrono::steady_clock::now() < c.releaseDeadline) {
      return;
    }
    AdminReply r = std::move(*c.pendingRelease);
    c.pendingRelease.reset();
    if (c.tally) r.traffic = c.tally->summary();
    c.tally.reset();
    if (!send(c, r)) closeConnection(c);
  }

  // The run placeholders for what `c` adopts for `task`: those of its task_env for that task,
  // else none (null).
  static std::shared_ptr<const broker::PlaceholderSet> runPlaceholders(const Connection& c,
                                                                       const std::string& task) {
    return c.placeholdersTask == task ? c.placeholders : nullptr;
  }

  void closeConnection(Connection& c) {
    if (!c.handles.empty()) {
      spdlog::info("admin socket {}: pid {} closed; releasing its listeners{}", options.path,
                   c.peer.pid, c.capture ? " and its capture" : "");
    }
    for (uint64_t h : c.handles) backend.release(h);
    c.handles.clear();
    c.capture.reset();
    c.placeholders.reset();
    ::close(c.fd);
    c.fd = -1;
  }

  AdminReply adoptCapture(Connection& c, const AdminRequest& req, std::vector<int>& fds) {
    if (!c.offer || !backend.adoptCapture) {
      return errorReply(admin_reason::kBadRequest,
                        "adopt_capture needs a task_env reply with \"capture\" on this connection "
                        "first (it names the ranges the sandbox routes)");
    }
    if (c.capture) {
      return errorReply(admin_reason::kBadRequest, "this connection has adopted a capture already");
    }
    if (auto bad = checkCaptureFds(fds, req.ports)) {
      return errorReply(admin_reason::kNotAListener,
                        fmt::format("cannot adopt the capture: {}", *bad));
    }
    // The DNS stub is on 127.0.0.53; the capture listeners are on the wildcard address of
    // the sandbox's namespace (its synthetic ranges are routed to lo there), so for them the
    // namespace is what shows they are a sandbox's.
    for (auto [fd, what] :
         {std::pair{fds[0], "the DNS UDP socket"}, std::pair{fds[1], "the DNS TCP socket"}}) {
      if (auto bad = checkLoopback(fd, what)) return refuse(c, *bad, "the capture");
    }
    if (auto bad = checkSandboxNetns(fds, serveNetns, c.netns)) {
      return refuse(c, *bad, "the capture");
    }
    auto v4 = policy::parseCidr(c.offer->ipv4Range), v6 = policy::parseCidr(c.offer->ipv6Range);
    if (!v4 || !v6) {  // serve wrote them itself: cannot happen
      return errorReply(admin_reason::kUnavailable, "this connection's capture ranges are invalid");
    }
    if (!c.tally) c.tally = std::make_shared<ListenerTally>(c.run);
    CaptureSockets sockets{fds[0], fds[1], std::vector<int>(fds.begin() + 2, fds.end())};
    size_t listeners = sockets.listeners.size();
    fds.clear();  // owned by adoptCapture now, closed by it on error
    auto adopted = backend.adoptCapture(std::move(sockets),
                                        CaptureOptions{req.task, req.ports, *v4, *v6, req.ipv6},
                                        c.tally, runPlaceholders(c, req.task));
    if (!adopted) {
      return errorReply(adopted.error());
    }
    c.handles.push_back(adopted->group);
    c.capture = adopted->context;
    spdlog::info(
        "admin socket {}: serving the DNS stub and {} capture listener(s) for task {} (pid {}, "
        "uid {})",
        options.path, listeners, req.task, c.peer.pid, c.peer.uid);
    AdminReply r;
    r.ok = true;
    return r;
  }

  // A descriptor refused for what it is; the caller closes it with the rest of the message's.
  AdminReply refuse(const Connection& c, const FdRefusal& bad, std::string_view what) {
    spdlog::warn("admin socket {}: pid {} uid {}: refusing {}: {}", options.path, c.peer.pid,
                 c.peer.uid, what, bad.message);
    return errorReply(bad.reason, fmt::format("cannot adopt {}: {}", what, bad.message));
  }

  AdminReply handle(Connection& c, const AdminRequest& req, std::vector<int>& fds) {
    if (req.op == AdminOp::kQuestions || req.op == AdminOp::kAnswer) {
      return serveQuestions(backend, c.peer, req, options.path);
    }
    // A task with admin_groups: only root and holders of one of them may use it.
    if (req.op != AdminOp::kRelease && backend.taskGroups) {
      if (auto allowed = backend.taskGroups(req.task)) {
        if (auto refused = checkTaskPeer(c.peer, req.task, *allowed)) {
          return errorReply(admin_reason::kPermissionDenied, "permission denied: " + *refused);
        }
      }
    }
    switch (req.op) {
      case AdminOp::kTaskEnv: {
        auto env = backend.environment(req.task);
        if (!env) return errorReply(env.error());
        AdminReply r;
        r.ok = true;
        c.offer = env->reply.capture;
        c.placeholders = std::move(env->placeholders);
        c.placeholdersTask = req.task;
        c.run = req.run;
        r.environment = std::move(env->reply);
        return r;
      }
      case AdminOp::kTokenEnv: {
        if (!backend.tokenEnvironment) {
          return errorReply(admin_reason::kBadRequest, "token_env is not served here");
        }
        auto env = backend.tokenEnvironment(req.task);
        if (!env) return errorReply(env.error());
        AdminReply r;
        r.ok = true;
        r.environment = std::move(env.value());
        return r;
      }
      case AdminOp::kAdopt: {
        if (fds.empty()) {
          return errorReply(admin_reason::kBadRequest,
                            "adopt needs the listening sockets attached (SCM_RIGHTS)");
        }
        for (int fd : fds) {
          if (auto bad = checkListenerFd(fd)) {
            return errorReply(admin_reason::kNotAListener,
                              fmt::format("cannot adopt a descriptor: {}", *bad));
          }
          if (auto bad = checkLoopback(fd, "a listener")) return refuse(c, *bad, "a listener");
        }
        if (auto bad = checkSandboxNetns(fds, serveNetns, c.netns)) {
          return refuse(c, *bad, "a listener");
        }
        if (!c.tally) c.tally = std::make_shared<ListenerTally>(c.run);
        size_t count = fds.size();
        auto handle =
            backend.adopt(std::move(fds), req.task, c.tally, runPlaceholders(c, req.task));
        fds.clear();  // owned by adopt now, closed by it on error
        if (!handle) {
          return errorReply(handle.error());
        }
        c.handles.push_back(handle.value());
        spdlog::info("admin socket {}: serving {} listener(s) for task {} (pid {}, uid {})",
                     options.path, count, req.task, c.peer.pid, c.peer.uid);
        AdminReply r;
        r.ok = true;
        return r;
      }
      case AdminOp::kAdoptCapture:
        return adoptCapture(c, req, fds);
      case AdminOp::kRelease:
        startRelease(c);
        return *c.pendingRelease;  // not sent: see serve()
      case AdminOp::kQuestions:
      case AdminOp::kAnswer:
        break;  // answered above
    }
    return errorReply(admin_reason::kBadRequest, "unknown op");
  }

  // Reads one request; false when the connection must be closed.
  bool serve(Connection& c) {
    iovec iov{buffer.data(), buffer.size()};
    std::vector<int> fds;
    int flags = 0;
    ssize_t n =
        fd_passing::receiveWithFds(c.fd, std::span<iovec>(&iov, 1), &fds, MSG_DONTWAIT, &flags);
    if (n < 0) return errno == EAGAIN;
    auto closeFds = [&] {
      for (int fd : fds) ::close(fd);
      fds.clear();
    };
    if (n == 0) {  // end of file: the launcher is done (or dead)
      closeFds();
      return false;
    }
    if (c.refusal) {
      closeFds();
      send(c, *c.refusal);
      return false;
    }
    AdminReply reply;
    if (flags & MSG_TRUNC) {
      reply = errorReply(admin_reason::kBadRequest,
                         fmt::format("message longer than {} bytes", kMaxAdminMessage));
    } else if ((flags & MSG_CTRUNC) || fds.size() > kMaxAdminFds) {
      reply = errorReply(admin_reason::kBadRequest,
                         fmt::format("more than {} descriptors attached", kMaxAdminFds));
    } else {
      auto req = parseRequest(std::string_view(buffer.data(), static_cast<size_t>(n)));
      if (!req) {
        reply = errorReply(req.error());
      } else {
        if (req->op != AdminOp::kAdopt && req->op != AdminOp::kAdoptCapture) closeFds();
        reply = handle(c, req.value(), fds);
      }
    }
    closeFds();  // whatever was not adopted
    if (c.pendingRelease) {
      finishRelease(c);  // at once when the run's sessions are done already
      return true;
    }
    if (!reply.ok) {
      spdlog::warn("admin socket {}: pid {} uid {}: {}: {}", options.path, c.peer.pid, c.peer.uid,
                   reply.reason, reply.error);
    }
    return send(c, reply);
  }

  void loop() {
    std::vector<pollfd> pfds;
    while (true) {
      pfds.clear();
      pfds.push_back({wakeFd, POLLIN, 0});
      pfds.push_back({listenFd, POLLIN, 0});
      bool releasing = false;
      for (const auto& c : connections) {
        // A connection waiting for its release reply is not polled meanwhile (a hang-up would
        // be reported at every poll); it is served again once the reply is out.
        pfds.push_back({c.pendingRelease ? -1 : c.fd, POLLIN, 0});
        releasing = releasing || c.pendingRelease.has_value();
      }
      // While a release waits, look at its sessions every 5 ms.
      int n = ::poll(pfds.data(), pfds.size(), releasing ? 5 : -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        spdlog::error("admin socket {}: poll: {}", options.path, std::strerror(errno));
        break;
      }
      if (pfds[0].revents) break;
      // Connections first: acceptAll() may append to `connections`.
      for (size_t i = 0; i < connections.size(); ++i) {
        auto& c = connections[i];
        if (c.pendingRelease) {
          finishRelease(c);
          continue;
        }
        short ev = pfds[i + 2].revents;
        if (!ev) continue;
        // POLLHUP with data still queued: read it first; recvmsg returns 0 once it is drained.
        if (!serve(connections[i])) closeConnection(connections[i]);
      }
      std::erase_if(connections, [](const Connection& c) { return c.fd < 0; });
      if (pfds[1].revents & POLLIN) acceptAll();
    }
    for (auto& c : connections) closeConnection(c);
    connections.clear();
  }
};

AdminSocket::AdminSocket(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AdminSocket::~AdminSocket() { stop(); }

const std::string& AdminSocket::path() const { return impl_->options.path; }

Result<std::unique_ptr<AdminSocket>> AdminSocket::open(AdminSocketOptions options,
                                                       AdminBackend backend) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->backend = std::move(backend);
  const std::string& path = impl->options.path;
  if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Diagnostic{"", 0, 0, "listen.admin",
                      fmt::format("'{}' cannot be a unix socket path", path)};
  }
  if (path.front() != '/') {
    return Diagnostic{"", 0, 0, "listen.admin", fmt::format("'{}' is not an absolute path", path)};
  }
  auto netns = ownNetns();
  if (!netns) {
    return Diagnostic{"", 0, 0, "listen.admin",
                      "cannot tell serve's own network namespace: " + netns.errorText()};
  }
  impl->serveNetns = netns.value();
  if (auto bad = prepareDirectory(path)) return *bad;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Diagnostic{"", 0, 0, "listen.admin",
                        fmt::format("{} exists and is not a socket; refusing to replace it", path)};
    }
    if (someoneListens(path)) {
      return Diagnostic{"", 0, 0, "listen.admin",
                        fmt::format("{} is in use by another server", path)};
    }
    if (::unlink(path.c_str()) != 0) return sysError(path, "cannot remove the stale socket");
    spdlog::info("admin socket {}: removed a stale socket", path);
  } else if (errno != ENOENT) {
    return sysError(path, "cannot check");
  }
  impl->listenFd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (impl->listenFd < 0) return sysError(path, "socket for");
  auto addr = unixAddress(path);
  if (::bind(impl->listenFd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return sysError(path, "cannot bind");
  }
  // Nobody can connect before listen(), so the mode set here is in place before anyone could
  // use the socket, whatever the umask made of it at bind().
  auto removeAndFail = [&](const char* what) {
    Diagnostic d = sysError(path, what);
    ::unlink(path.c_str());
    return d;
  };
  if (impl->options.group) {
    if (::chown(path.c_str(), static_cast<uid_t>(-1), *impl->options.group) != 0)
      return removeAndFail("cannot chown");
    if (::chmod(path.c_str(), 0660) != 0) return removeAndFail("cannot chmod");
  } else if (::chmod(path.c_str(), 0600) != 0) {
    return removeAndFail("cannot chmod");
  }
  if (::lstat(path.c_str(), &impl->bound) != 0) return removeAndFail("cannot stat");
  if (::listen(impl->listenFd, 64) != 0) return removeAndFail("cannot listen on");
  impl->wakeFd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->wakeFd < 0) return removeAndFail("eventfd for");
  return std::unique_ptr<AdminSocket>(new AdminSocket(std::move(impl)));
}

void AdminSocket::start() {
  std::lock_guard lock(impl_->stopMu);
  if (impl_->stopped || impl_->thread.joinable()) return;
  impl_->thread = std::thread([im = impl_.get()] { im->loop(); });
}

void AdminSocket::stop() {
  auto& im = *impl_;
  std::lock_guard lock(im.stopMu);
  if (im.stopped) return;
  im.stopped = true;
  uint64_t one = 1;
  if (::write(im.wakeFd, &one, sizeof(one)) < 0) {
    spdlog::error("admin socket {}: cannot wake the admin thread", im.options.path);
  }
  if (im.thread.joinable()) im.thread.join();
  for (auto& c : im.connections) im.closeConnection(c);  // never started: none
  ::close(im.listenFd);
  im.listenFd = -1;
  // Remove the file only if it is still the socket we bound (not one a successor created).
  struct stat st {};
  if (::lstat(im.options.path.c_str(), &st) == 0 && st.st_ino == im.bound.st_ino &&
      st.st_dev == im.bound.st_dev) {
    ::unlink(im.options.path.c_str());
  }
}

}  // namespace sandgate::proxy
