// The worker loop and its adaptive spin (see worker_loop.h).
#include "proxy/server/worker_loop.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>

namespace sandgate::proxy {

namespace {
// Below limit / kSmallest the window is dropped to zero rather than halved forever; growing
// starts again from that size.
constexpr int kSmallest = 8;
}  // namespace

void IdleSpin::shrink() {
  window_ /= 2;
  if (window_ < limit_ / kSmallest) window_ = Duration::zero();
}

void IdleSpin::afterIdle(Duration idle) {
  if (idle > limit_) {
    shrink();
  } else if (idle > window_) {
    window_ = std::min(limit_, std::max(window_ * 2, limit_ / kSmallest));
  }
}

void runWorker(boost::asio::io_context& io, std::chrono::nanoseconds spinLimit) {
  if (spinLimit <= std::chrono::nanoseconds::zero()) {
    io.run();
    return;
  }
  using Clock = std::chrono::steady_clock;
  IdleSpin spin(spinLimit);
  while (true) {
    if (io.poll() > 0) continue;  // handlers ran (poll checks epoll without waiting)
    if (io.stopped()) return;     // out of work, or stopped
    // The idle period ends at the poll that finds work (a caught spin) or when the blocking
    // wait returns; the latter includes the first handler's run, so a gap measured after a
    // block is an upper bound.
    const auto idleFrom = Clock::now();
    const auto spinUntil = idleFrom + spin.window();
    auto idleTo = idleFrom;
    bool caught = false;
    // The spin neither yields nor stops when the kernel preempts it. At a proxied request's
    // gaps the thread that takes this core is most often the client or the upstream of that
    // very request, whose answer comes a few microseconds later: a worker that gave up then
    // would sleep and have to be woken for it. (A yield at every turn that ended the spin once
    // another thread had run cost 4-10 % of the requests per second at 1 connection: the
    // median ratio of four sets of alternating pairs, 40 of 52 pairs ahead without it.)
    // Anything else that wants the core gets its share from the scheduler, and the window
    // bounds what a spin takes.
    while (idleTo < spinUntil) {
      if (io.poll() > 0) {
        caught = true;
        break;
      }
      if (io.stopped()) return;
      idleTo = Clock::now();
    }
    if (!caught) {
      if (io.run_one() == 0) return;
      idleTo = Clock::now();
    }
    spin.afterIdle(idleTo - idleFrom);
  }
}

}  // namespace sandgate::proxy
