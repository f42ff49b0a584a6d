// Tunnel relay with splice(2) and a buffered fallback (see tunnel.h).
//
// Idle cost: a direction that has nothing to move waits for readability and holds no pipe and
// no buffer. When the source becomes readable it borrows a pipe from a small per-thread pool
// (or creates one), splices until the source would block, and gives the (empty) pipe back.
#include "proxy/net/tunnel.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "proxy/net/completion.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr int kPipeSize = 1024 * 1024;        // F_SETPIPE_SZ for active directions
constexpr size_t kPoolPerThread = 16;         // empty pipes kept per thread for reuse
constexpr size_t kBufferedChunk = 16 * 1024;  // the fallback's buffer, only while active

struct Activity {
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  void touch() { last = std::chrono::steady_clock::now(); }
};

// A pipe: two fds and its capacity. Closed on destruction unless given back to the pool.
class Pipe {
 public:
  Pipe() = default;
  Pipe(Pipe&& o) noexcept
      : r_(std::exchange(o.r_, -1)), w_(std::exchange(o.w_, -1)), cap_(o.cap_) {}
  Pipe& operator=(Pipe&& o) noexcept {
    if (this != &o) {
      reset();
      r_ = std::exchange(o.r_, -1);
      w_ = std::exchange(o.w_, -1);
      cap_ = o.cap_;
    }
    return *this;
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  ~Pipe() { reset(); }

  static Pipe create() {
    Pipe p;
    int fds[2];
    if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return p;
    p.r_ = fds[0];
    p.w_ = fds[1];
    int size = ::fcntl(p.w_, F_SETPIPE_SZ, kPipeSize);
    if (size <= 0) size = ::fcntl(p.w_, F_GETPIPE_SZ);
    p.cap_ = size > 0 ? static_cast<size_t>(size) : 64 * 1024;
    return p;
  }
  void reset() {
    if (r_ >= 0) ::close(r_);
    if (w_ >= 0) ::close(w_);
    r_ = w_ = -1;
  }
  bool ok() const { return r_ >= 0; }
  int readEnd() const { return r_; }
  int writeEnd() const { return w_; }
  size_t capacity() const { return cap_; }

 private:
  int r_ = -1;
  int w_ = -1;
  size_t cap_ = 0;
};

// Empty pipes for reuse by the directions that run on this thread. A pipe may be borrowed on
// one thread and returned on another; each pool is only touched by its own thread.
struct PipePool {
  std::vector<Pipe> pipes;
  Pipe acquire() {
    if (pipes.empty()) return Pipe::create();
    Pipe p = std::move(pipes.back());
    pipes.pop_back();
    return p;
  }
  // Only for a pipe known to be empty.
  void release(Pipe& p) {
    if (p.ok() && pipes.size() < kPoolPerThread) {
      if (pipes.capacity() == 0) pipes.reserve(kPoolPerThread);
      pipes.push_back(std::move(p));
    } else {
      p.reset();
    }
  }
};

PipePool& pipePool() {
  thread_local PipePool pool;
  return pool;
}

struct Direction {
  uint64_t bytes = 0;
  std::string error;
  bool spliced = true;
};

// Ends the tunnel in both directions after an error on either side (a reset, a failed
// write). Each peer must see a reset, not the end of a stream: a plain TCP stream cut short
// would look whole. So nothing is shut down (that sends a FIN); both sockets reset when their
// owners close them (SO_LINGER 0; see runTunnel in tunnel.h), and every wait on them is
// cancelled, which ends the other direction without a half-close.
void abortBoth(tcp::socket& a, tcp::socket& b) {
  boost::system::error_code ignored;
  for (tcp::socket* s : {&a, &b}) {
    s->set_option(asio::socket_base::linger(true, 0), ignored);
    s->cancel(ignored);
  }
}

void halfClose(tcp::socket& to) {
  boost::system::error_code ignored;
  to.shutdown(tcp::socket::shutdown_send, ignored);
}

// Waits until `from` is readable. False when cancelled (idle timeout, the tunnel ending).
asio::awaitable<bool> waitReadable(tcp::socket& from) {
  auto [ec] = co_await from.async_wait(tcp::socket::wait_read, kUse);
  co_return !ec;
}

// The buffered fallback. The buffer exists only while data is moving: a short read (the
// source is drained) gives it back before waiting again.
asio::awaitable<void> copyBuffered(tcp::socket& from, tcp::socket& to, Direction& dir,
                                   Activity& act) {
  std::unique_ptr<char[]> buf;
  while (true) {
    if (!buf) {
      if (!co_await waitReadable(from)) co_return;
      buf.reset(new char[kBufferedChunk]);
    }
    auto [ec, n] = co_await from.async_read_some(asio::buffer(buf.get(), kBufferedChunk), kUse);
    if (n > 0) {
      act.touch();
      auto [wec, wn] = co_await asio::async_write(to, asio::buffer(buf.get(), n), kUse);
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
    if (n < kBufferedChunk) buf.reset();
  }
}

asio::awaitable<void> pump(tcp::socket& from, tcp::socket& to, Direction& dir, Activity& act) {
  boost::system::error_code ec;
  from.native_non_blocking(true, ec);
  if (!ec) to.native_non_blocking(true, ec);
  if (ec) {
    dir.spliced = false;
    co_await copyBuffered(from, to, dir, act);
    co_return;
  }
  const int in = from.native_handle(), out = to.native_handle();
  bool first = true;
  Pipe pipe;  // held only while this direction is moving data; always empty between splices
  while (true) {
    if (!pipe.ok()) {
      if (!co_await waitReadable(from)) co_return;
      pipe = pipePool().acquire();
      if (!pipe.ok()) {  // no pipe (fd limit): nothing is in flight, copy through a buffer
        dir.spliced = false;
        co_await copyBuffered(from, to, dir, act);
        co_return;
      }
    }
    ssize_t n = ::splice(in, nullptr, pipe.writeEnd(), nullptr, pipe.capacity(),
                         SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n == 0) {
      pipePool().release(pipe);
      halfClose(to);
      co_return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // drained: give the pipe back and wait
        pipePool().release(pipe);
        continue;
      }
      if (first && (errno == EINVAL || errno == ENOSYS)) {
        pipePool().release(pipe);
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
    // Empty the pipe into `to` before reading more (the pipe holds no data while idle).
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
        if (wec) co_return;  // the pipe still holds data: it is closed, not pooled
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
