// Deadlines without a timer per operation (see deadline_stream.h).
#include "proxy/net/deadline_stream.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/require.hpp>
#include <stdexcept>
#include <utility>

namespace sandgate::proxy {

namespace asio = boost::asio;
using Clock = DeadlineSweeper::Clock;

namespace {

// Sockets here live on io_contexts (a worker's, the control thread's); the sweeper's timer
// runs on the same one.
DeadlineSweeper& sweeperFor(const asio::any_io_executor& ex) {
  using Untracked = asio::io_context::executor_type;
  using Tracked =
      decltype(asio::require(std::declval<Untracked>(), asio::execution::outstanding_work.tracked));
  if (const auto* e = ex.target<Untracked>())
    return asio::use_service<DeadlineSweeper>(e->context());
  if (const auto* e = ex.target<Tracked>()) return asio::use_service<DeadlineSweeper>(e->context());
  throw std::logic_error("DeadlineStream needs a socket on an io_context");
}

}  // namespace

asio::execution_context::id DeadlineSweeper::id;

// The timer is made here, so that its service is registered before this one: services are
// shut down and destroyed newest first, and the timer must go before the timer service does.
DeadlineSweeper::DeadlineSweeper(asio::io_context& io)
    : asio::execution_context::service(io), timer_(io) {}

void DeadlineSweeper::track(detail::DeadlineState& s) {
  if (!s.linked) {
    s.linked = true;
    s.prev = nullptr;
    s.next = head_;
    if (head_ != nullptr) head_->prev = &s;
    head_ = &s;
    ++watched_;
  }
  arm(s.deadline);
}

void DeadlineSweeper::untrack(detail::DeadlineState& s) {
  if (!s.linked) return;
  if (s.prev != nullptr) s.prev->next = s.next;
  if (s.next != nullptr) s.next->prev = s.prev;
  if (head_ == &s) head_ = s.next;
  s.prev = s.next = nullptr;
  s.linked = false;
  --watched_;
}

// The timer moves only for an earlier deadline than the one it is set for.
void DeadlineSweeper::arm(Clock::time_point at) {
  if (armed_ && at >= timer_.expiry()) return;
  armed_ = true;
  const uint64_t generation = ++armGeneration_;
  timer_.expires_at(at);  // a wait set before ends with operation_aborted
  timer_.async_wait([this, generation](const boost::system::error_code& ec) {
    if (ec || generation != armGeneration_) return;
    armed_ = false;
    sweep();
  });
}

void DeadlineSweeper::sweep() {
  const auto now = Clock::now();
  auto earliest = Clock::time_point::max();
  for (detail::DeadlineState* s = head_; s != nullptr;) {
    detail::DeadlineState* next = s->next;
    if (s->pending == 0 || s->deadline == Clock::time_point::max()) {
      untrack(*s);  // watched again when its next operation starts
    } else if (s->deadline <= now) {
      // Like Beast's tcp_stream: the socket is closed, its pending operations end (and are
      // reported as timeouts), later ones fail.
      s->timedOut = true;
      boost::system::error_code ignored;
      s->socket.close(ignored);
      untrack(*s);
    } else if (s->deadline < earliest) {
      earliest = s->deadline;
    }
    s = next;
  }
  if (earliest != Clock::time_point::max()) arm(earliest);
}

void DeadlineSweeper::shutdown() {
  while (head_ != nullptr) untrack(*head_);
  ++armGeneration_;
}

namespace detail {

DeadlineState::DeadlineState(asio::ip::tcp::socket s)
    : socket(std::move(s)), sweeper(sweeperFor(socket.get_executor())) {}

DeadlineState::~DeadlineState() { sweeper.untrack(*this); }

void DeadlineState::started() {
  ++pending;
  if (deadline != Clock::time_point::max()) sweeper.track(*this);
}

}  // namespace detail

DeadlineStream::DeadlineStream(socket_type socket)
    : state_(std::make_shared<detail::DeadlineState>(std::move(socket))) {}

DeadlineStream::DeadlineStream(const executor_type& ex) : DeadlineStream(socket_type(ex)) {}

DeadlineStream::~DeadlineStream() {
  if (state_) close();
}

DeadlineStream& DeadlineStream::operator=(DeadlineStream&& other) noexcept {
  if (this != &other) {
    if (state_) close();
    state_ = std::move(other.state_);
  }
  return *this;
}

DeadlineStream::socket_type DeadlineStream::release_socket() {
  state_->sweeper.untrack(*state_);
  socket_type s(std::move(state_->socket));
  return s;
}

void DeadlineStream::setDeadline(Clock::time_point at) {
  state_->deadline = at;
  if (state_->pending > 0) state_->sweeper.track(*state_);
}

void DeadlineStream::expires_never() { state_->deadline = Clock::time_point::max(); }

void DeadlineStream::cancel() {
  boost::system::error_code ignored;
  state_->socket.cancel(ignored);
}

void DeadlineStream::close() {
  boost::system::error_code ignored;
  state_->socket.close(ignored);
}

}  // namespace sandgate::proxy
