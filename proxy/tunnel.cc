// Tunnel relay with splice(2) and a buffered fallback (see tunnel.h).
#include "proxy/tunnel.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>

#include "proxy/server_context.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr size_t kChunk = 64 * 1024;

struct Activity {
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  void touch() { last = std::chrono::steady_clock::now(); }
};

class Pipe {
 public:
  Pipe() {
    if (::pipe2(fds_, O_NONBLOCK | O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;
  }
  ~Pipe() {
    if (fds_[0] >= 0) ::close(fds_[0]);
    if (fds_[1] >= 0) ::close(fds_[1]);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  bool ok() const { return fds_[0] >= 0; }
  int readEnd() const { return fds_[0]; }
  int writeEnd() const { return fds_[1]; }

 private:
  int fds_[2];
};

struct Direction {
  uint64_t bytes = 0;
  std::string error;
  bool spliced = true;
};

// Ends the tunnel in both directions after an error on either side.
void abortBoth(tcp::socket& a, tcp::socket& b) {
  boost::system::error_code ignored;
  a.shutdown(tcp::socket::shutdown_both, ignored);
  b.shutdown(tcp::socket::shutdown_both, ignored);
}

void halfClose(tcp::socket& to) {
  boost::system::error_code ignored;
  to.shutdown(tcp::socket::shutdown_send, ignored);
}

asio::awaitable<void> copyBuffered(tcp::socket& from, tcp::socket& to, Direction& dir,
                                   Activity& act) {
  std::array<char, 16 * 1024> buf;
  while (true) {
    auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), kUse);
    if (n > 0) {
      act.touch();
      auto [wec, wn] = co_await asio::async_write(to, asio::buffer(buf.data(), n), kUse);
      if (wec) {
        dir.error = wec.message();
        abortBoth(from, to);
        co_return;
      }
      dir.bytes += wn;
      act.touch();
    }
    if (ec == asio::error::eof) {
      halfClose(to);
      co_return;
    }
    if (ec) {
      if (ec != asio::error::operation_aborted) {
        dir.error = ec.message();
        abortBoth(from, to);
      }
      co_return;
    }
  }
}

asio::awaitable<void> pump(tcp::socket& from, tcp::socket& to, Direction& dir, Activity& act) {
  Pipe pipe;
  boost::system::error_code ec;
  from.native_non_blocking(true, ec);
  if (!ec) to.native_non_blocking(true, ec);
  if (!pipe.ok() || ec) {
    dir.spliced = false;
    co_await copyBuffered(from, to, dir, act);
    co_return;
  }
  const int in = from.native_handle(), out = to.native_handle();
  bool first = true;
  while (true) {
    ssize_t n =
        ::splice(in, nullptr, pipe.writeEnd(), nullptr, kChunk, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n == 0) {
      halfClose(to);
      co_return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        auto [wec] = co_await from.async_wait(tcp::socket::wait_read, kUse);
        if (wec) co_return;  // cancelled: idle timeout or the tunnel is ending
        continue;
      }
      if (first && (errno == EINVAL || errno == ENOSYS)) {
        dir.spliced = false;
        co_await copyBuffered(from, to, dir, act);
        co_return;
      }
      dir.error = std::strerror(errno);
      abortBoth(from, to);
      co_return;
    }
    first = false;
    act.touch();
    size_t pending = static_cast<size_t>(n);
    while (pending > 0) {
      ssize_t m = ::splice(pipe.readEnd(), nullptr, out, nullptr, pending,
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (m > 0) {
        pending -= static_cast<size_t>(m);
        dir.bytes += static_cast<uint64_t>(m);
        act.touch();
        continue;
      }
      if (m < 0 && errno == EINTR) continue;
      if (m < 0 && errno == EAGAIN) {
        auto [wec] = co_await to.async_wait(tcp::socket::wait_write, kUse);
        if (wec) co_return;
        continue;
      }
      dir.error = m == 0 ? "short splice" : std::strerror(errno);
      abortBoth(from, to);
      co_return;
    }
  }
}

asio::awaitable<void> watchIdle(Activity& act, std::chrono::steady_clock::duration idle) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (true) {
    timer.expires_at(act.last + idle);
    auto [ec] = co_await timer.async_wait(kUse);
    if (ec) co_return;  // cancelled: the tunnel ended first
    if (std::chrono::steady_clock::now() >= act.last + idle) co_return;
  }
}

}  // namespace

asio::awaitable<TunnelResult> runTunnel(tcp::socket& client, tcp::socket& upstream,
                                        std::chrono::steady_clock::duration idleTimeout) {
  Activity act;
  Direction up, down;
  auto outcome = co_await ((pump(client, upstream, up, act) && pump(upstream, client, down, act)) ||
                           watchIdle(act, idleTimeout));
  TunnelResult r;
  r.bytesUp = up.bytes;
  r.bytesDown = down.bytes;
  r.idleTimeout = outcome.index() == 1;
  r.spliced = up.spliced && down.spliced;
  r.error = !up.error.empty() ? up.error : down.error;
  r.upstreamReset = !down.error.empty();
  co_return r;
}

}  // namespace sandgate::proxy
