// A worker's event loop: io_context::run() with a short, adaptive spin before it sleeps.
//
// When a worker runs out of ready handlers it can either block in epoll_wait at once or keep
// polling for a little while. Blocking is the right answer for long idle periods; for the
// short gaps of a request in flight (the upstream answering, a client sending its next
// request on a keep-alive connection) the sleep and the wake-up that ends it cost more than
// the gap itself on many machines (a halted virtual CPU is woken by an inter-processor
// interrupt through the hypervisor). The spin is adaptive, in the manner of the kernel's
// haltpoll governor: it grows while the gaps it sees are shorter than the limit and shrinks
// (to nothing) while the gaps are longer, so an idle or sparsely used proxy does not burn CPU.
// It does not yield the core at every turn, nor end when preempted (see runWorker): the
// scheduler shares the core with whatever else wants it, and the window bounds each spin.
#pragma once

#include <chrono>

namespace boost::asio {
class io_context;
}

namespace sandgate::proxy {

class IdleSpin {
 public:
  using Duration = std::chrono::nanoseconds;

  // `limit`: the longest spin; zero disables spinning.
  explicit IdleSpin(Duration limit) : limit_(limit), window_(limit) {}

  // How long to poll before blocking this time.
  Duration window() const { return window_; }
  // An idle period ended after `idle` (spinning and blocking together): a gap longer than the
  // limit shrinks the window (halves it, down to nothing), one longer than the window but
  // within the limit grows it (doubles it, up to the limit), one the spin caught keeps it.
  void afterIdle(Duration idle);

 private:
  void shrink();

  Duration limit_;
  Duration window_;
};

// Runs `io` like io_context::run() (returns when it runs out of work or is stopped), spinning
// for up to `spinLimit` before each blocking wait. Exceptions from handlers propagate.
void runWorker(boost::asio::io_context& io, std::chrono::nanoseconds spinLimit);

}  // namespace sandgate::proxy
