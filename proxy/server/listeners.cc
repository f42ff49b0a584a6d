// A server's sockets: its own listeners, the accept loop, and the listening and DNS sockets
// a launcher hands over (adopted groups, transparent capture).
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstring>

#include "broker/placeholder.h"
#include "common/host_port.h"
#include "proxy/capture_server/dns_server.h"
#include "proxy/net/endpoint.h"
#include "proxy/observe/listener_tally.h"
#include "proxy/server/server_impl.h"
#include "proxy/upstream/upstream.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
using asio::ip::tcp;
using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

namespace {

bool isResourceExhaustion(const boost::system::error_code& ec) {
  return ec == asio::error::no_descriptors || ec.value() == ENFILE || ec.value() == ENOBUFS ||
         ec.value() == ENOMEM;
}

OwnEndpoint ownEndpoint(const tcp::endpoint& ep) { return {toIpAddress(ep.address()), ep.port()}; }

int socketFamily(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 ? addr.ss_family
                                                                          : AF_UNSPEC;
}

}  // namespace

// `owner`, when set, is the acceptor's owner kept alive by this frame: an adopted listener is
// released by closing it on its worker and dropping the registry's reference, which must never
// leave this loop on a freed object.
asio::awaitable<void> acceptLoop(Worker& worker, ServerState& state, tcp::acceptor& acceptor,
                                 std::shared_ptr<const ListenerInfo> listener,
                                 std::shared_ptr<tcp::acceptor> owner) {
  static_cast<void>(owner);  // held, not used
  asio::steady_timer backoff(acceptor.get_executor());
  auto lastWarning = std::chrono::steady_clock::time_point{};
  while (acceptor.is_open()) {
    auto [ec, socket] = co_await acceptor.async_accept(kUse);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of descriptors (or memory): the pending connection stays in the backlog, so
      // pause instead of spinning, and keep serving the connections we have.
      auto now = std::chrono::steady_clock::now();
      if (now - lastWarning > std::chrono::seconds(10)) {
        spdlog::warn("accept on {}: {}; backing off", listener->name, ec.message());
        lastWarning = now;
      }
      backoff.expires_after(isResourceExhaustion(ec) ? std::chrono::milliseconds(100)
                                                     : std::chrono::milliseconds(5));
      co_await backoff.async_wait(kUse);
      continue;
    }
    // Responses go out as a header write and then body writes; see upstream.cc on Nagle.
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (listener->tally) {
      // Counted until the session ends, so that a release waits for its last audit record.
      listener->tally->sessionStarted();
      asio::co_spawn(worker.io, runSession(worker, state, std::move(socket), listener),
                     [tally = listener->tally](std::exception_ptr e) {
                       tally->sessionEnded();
                       logException(e);
                     });
    } else {
      asio::co_spawn(worker.io, runSession(worker, state, std::move(socket), listener),
                     logException);
    }
  }
}

Result<tcp::endpoint> listenEndpoint(const config::Config& cfg,
                                     const config::Located<std::string>& value,
                                     std::string_view key) {
  auto hp = parseListenAddress(value.value);  // port 0: any free port (tests)
  if (!hp) {
    return Diagnostic{cfg.file, value.mark.line, value.mark.col, std::string(key),
                      "expected host:port"};
  }
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(hp->host == "localhost" ? "127.0.0.1" : hp->host, ec);
  if (ec) {
    return Diagnostic{cfg.file, value.mark.line, value.mark.col, std::string(key),
                      fmt::format("'{}' is not an IP address", hp->host)};
  }
  return tcp::endpoint(addr, hp->port);
}

void AdoptedGroup::close() const {
  for (const auto& [w, acc] : acceptors) {
    asio::post(w->io, [acc = acc] {
      boost::system::error_code ec;
      acc->close(ec);
    });
  }
  for (const auto& [w, sock] : datagrams) {
    asio::post(w->io, [sock = sock] {
      boost::system::error_code ec;
      sock->close(ec);
    });
  }
}

void Server::Impl::addOwn(const tcp::endpoint& ep) {
  std::lock_guard lock(ownMu);
  auto e = ownEndpoint(ep);
  // Every sandbox's listeners are 127.0.0.1:3128 and [::1]:3128: keep each address once.
  for (const auto& o : own) {
    if (o.address == e.address && o.port == e.port) return;
  }
  own.push_back(e);
  state.ownEndpoints.store(std::make_shared<const std::vector<OwnEndpoint>>(own));
}

Result<void> Server::Impl::bindProxy(const tcp::endpoint& ep) {
  // One acceptor per worker on the same port (SO_REUSEPORT): the kernel spreads new
  // connections over the workers without a shared accept queue or a lock.
  tcp::endpoint bound = ep;
  for (auto& w : workers) {
    auto acc = std::make_unique<tcp::acceptor>(w->io);
    boost::system::error_code ec;
    acc->open(bound.protocol(), ec);
    if (!ec) acc->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acc->set_option(ReusePort(true), ec);
    if (!ec) acc->bind(bound, ec);
    if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Diagnostic{"", 0, 0, "listen.proxy",
                        fmt::format("cannot listen on {}: {}", endpointText(bound), ec.message())};
    }
    bound = acc->local_endpoint();
    w->acceptors.push_back(std::move(acc));
  }
  proxyEndpoint = bound;
  addOwn(bound);
  return {};
}

Result<void> Server::adoptListener(int fd, std::string task,
                                   std::shared_ptr<const broker::PlaceholderSet> placeholders) {
  auto group = adoptListeners({fd}, std::move(task), nullptr, nullptr, std::move(placeholders));
  if (!group) return group.errors();
  return {};
}

Result<uint64_t> Server::adoptListeners(
    std::vector<int> fds, std::string task, std::shared_ptr<ListenerTally> tally,
    std::shared_ptr<CaptureContext> capture,
    std::shared_ptr<const broker::PlaceholderSet> placeholders) {
  auto& im = *impl_;
  // A run without placeholders of its own honours none: never another run's, never the token
  // clients' of its task.
  if (!placeholders) {
    placeholders =
        std::make_shared<const broker::PlaceholderSet>(std::vector<broker::Placeholder>{});
  }
  auto closeAll = [&] {
    for (int fd : fds) ::close(fd);
  };
  if (im.state.draining.load()) {
    closeAll();
    return Diagnostic{"", 0, 0, "", "the server is shutting down"};
  }
  struct Pending {
    Worker* worker;
    std::shared_ptr<tcp::acceptor> acceptor;
    std::shared_ptr<const ListenerInfo> info;
  };
  std::vector<Pending> pending;
  std::vector<tcp::endpoint> locals;
  for (int fd : fds) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    sockaddr_storage addr{};
    socklen_t addrLen = sizeof(addr);
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addrLen) != 0 ||
        (addr.ss_family != AF_INET && addr.ss_family != AF_INET6)) {
      closeAll();
      return Diagnostic{"", 0, 0, "", fmt::format("fd {} is not a listening TCP socket", fd)};
    }
    tcp::endpoint local;
    std::memcpy(local.data(), &addr, std::min<size_t>(addrLen, sizeof(addr)));
    local.resize(addrLen);
    auto info = std::make_shared<const ListenerInfo>(
        ListenerInfo{endpointText(local), task, tally, capture, placeholders,
                     tally ? tally->run() : std::string()});
    // Every worker accepts on its own duplicate of the descriptor (one shared queue). The
    // acceptors are registered here (the reactor is thread-safe) and used only on their worker.
    for (auto& w : im.workers) {
      int dupFd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
      if (dupFd < 0) {
        auto err = fmt::format("dup of fd {}: {}", fd, std::strerror(errno));
        closeAll();
        return Diagnostic{"", 0, 0, "", err};
      }
      auto acc = std::make_shared<tcp::acceptor>(w->io);
      boost::system::error_code ec;
      acc->assign(local.protocol(), dupFd, ec);
      if (ec) {
        ::close(dupFd);
        closeAll();
        return Diagnostic{"", 0, 0, "",
                          fmt::format("adopting listener {}: {}", info->name, ec.message())};
      }
      pending.push_back(Pending{w.get(), std::move(acc), info});
    }
    locals.push_back(local);
  }
  closeAll();  // the workers hold duplicates
  // A capture listener is bound to a wildcard inside the sandbox's network namespace: as an
  // "own endpoint" it would make every loopback upstream on port 80/443 look like a loop, and
  // nothing on the host can reach it anyway.
  if (!capture) {
    for (const auto& local : locals) im.addOwn(local);
  }
  uint64_t group;
  {
    std::lock_guard lock(im.adoptMu);
    group = im.nextGroup++;
    auto& entry = im.adopted[group];
    for (const auto& p : pending) entry.acceptors.emplace_back(p.worker, p.acceptor);
  }
  for (auto& p : pending) {
    asio::post(p.worker->io, [w = p.worker, state = &im.state, acc = p.acceptor, info = p.info] {
      if (state->draining.load()) {
        boost::system::error_code ec;
        acc->close(ec);
        return;
      }
      asio::co_spawn(w->io, acceptLoop(*w, *state, *acc, info, acc), logException);
    });
  }
  return group;
}

void Server::releaseListeners(uint64_t group) {
  AdoptedGroup sockets;
  {
    std::lock_guard lock(impl_->adoptMu);
    auto it = impl_->adopted.find(group);
    if (it == impl_->adopted.end()) return;
    sockets = std::move(it->second);
    impl_->adopted.erase(it);
  }
  sockets.close();
}

Result<AdoptedCapture> Server::adoptCapture(
    CaptureSockets sockets, CaptureOptions options, std::shared_ptr<ListenerTally> tally,
    std::shared_ptr<const broker::PlaceholderSet> placeholders) {
  auto& im = *impl_;
  auto fail = [&](std::string message) {
    sockets.close();
    return Diagnostic{"", 0, 0, "", std::move(message)};
  };
  if (auto e = capture::checkPoolRanges(options.v4, options.v6)) return fail(*e);
  if (sockets.dnsUdp >= 0) {
    if (auto bad = checkDatagramFd(sockets.dnsUdp)) return fail("the DNS UDP socket: " + *bad);
  }
  if (sockets.dnsTcp >= 0) {
    if (auto bad = checkListenerFd(sockets.dnsTcp)) return fail("the DNS TCP socket: " + *bad);
  }
  const std::string task = options.task;
  auto ctx = std::make_shared<CaptureContext>(std::move(options), im.state, tally);
  // The capture listeners make the group (and are checked there); the DNS sockets join it.
  auto group =
      adoptListeners(std::move(sockets.listeners), task, tally, ctx, std::move(placeholders));
  sockets.listeners.clear();  // adoptListeners owns them, on error too
  if (!group) {
    sockets.close();
    return group.errors();
  }
  // The DNS stub is light (one datagram, one answer): both sockets live on the first worker.
  // Assigned here (the reactor is thread-safe), served from its thread.
  Worker* w = im.workers.front().get();
  std::shared_ptr<asio::ip::udp::socket> udp;
  std::shared_ptr<tcp::acceptor> acc;
  boost::system::error_code ec;
  if (sockets.dnsUdp >= 0) {
    udp = std::make_shared<asio::ip::udp::socket>(w->io);
    bool v6 = socketFamily(sockets.dnsUdp) == AF_INET6;
    udp->assign(v6 ? asio::ip::udp::v6() : asio::ip::udp::v4(), sockets.dnsUdp, ec);
    if (!ec) sockets.dnsUdp = -1;  // the socket object owns it
  }
  if (!ec && sockets.dnsTcp >= 0) {
    acc = std::make_shared<tcp::acceptor>(w->io);
    bool v6 = socketFamily(sockets.dnsTcp) == AF_INET6;
    acc->assign(v6 ? tcp::v6() : tcp::v4(), sockets.dnsTcp, ec);
    if (!ec) sockets.dnsTcp = -1;
  }
  if (ec) {
    releaseListeners(group.value());
    sockets.close();
    return Diagnostic{"", 0, 0, "", fmt::format("adopting the DNS stub: {}", ec.message())};
  }
  {
    std::lock_guard lock(im.adoptMu);
    auto& entry = im.adopted[group.value()];
    if (udp) entry.datagrams.emplace_back(w, udp);
    if (acc) entry.acceptors.emplace_back(w, acc);
  }
  // Posted after the group's listeners: a release posts its closes after this, so the loops
  // always start on an open socket and see it closed.
  asio::post(w->io, [w, state = &im.state, udp, acc, ctx] {
    boost::system::error_code ignored;
    if (state->draining.load()) {
      if (udp) udp->close(ignored);
      if (acc) acc->close(ignored);
      return;
    }
    if (udp) asio::co_spawn(w->io, serveDnsUdp(udp, ctx), logException);
    if (acc) asio::co_spawn(w->io, serveDnsTcp(acc, ctx), logException);
  });
  return AdoptedCapture{ctx, group.value()};
}

}  // namespace sandgate::proxy
