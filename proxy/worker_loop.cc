// The worker loop and its adaptive spin (see worker_loop.h).
#include "proxy/worker_loop.h"

#include <sched.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>

namespace sandgate::proxy {

namespace {
// Below limit / kSmallest the window is dropped to zero rather than halved forever; growing
// starts again from that size.
constexpr int kSmallest = 8;
// A sched_yield() that took longer than this let another thread run.
constexpr std::chrono::microseconds kOtherThreadRan{10};
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
    bool caught = false, contended = false;
    while (idleTo < spinUntil) {
      if (io.poll() > 0) {
        caught = true;
        break;
      }
      if (io.stopped()) return;
      // Polite: a thread that is runnable on this core (the client or upstream woken here,
      // a build next to the proxy) gets it now instead of when the spin ends; and once one
      // did, the core is wanted: stop spinning and sleep.
      const auto yieldFrom = Clock::now();
      ::sched_yield();
      idleTo = Clock::now();
      if (idleTo - yieldFrom > kOtherThreadRan) {
        contended = true;
        break;
      }
    }
    if (!caught) {
      if (io.run_one() == 0) return;
      idleTo = Clock::now();
    }
    if (contended) {
      spin.afterContention();
    } else {
      spin.afterIdle(idleTo - idleFrom);
    }
  }
}

}  // namespace sandgate::proxy
