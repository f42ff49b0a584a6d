// A TCP stream with deadlines but without a timer per operation. Internal to proxy/.
//
// Beast's tcp_stream arms and cancels a timer around every read and write: on a keep-alive
// connection that is four timer-queue updates (each a timerfd_settime) and the wake-ups that
// go with them per proxied request. DeadlineStream keeps the same contract — expires_after()
// and expires_never() apply to the operations pending and started after them; an operation
// still pending at the deadline ends with beast::error::timeout, and the socket is closed —
// but only records the deadline. One DeadlineSweeper per io_context, with one timer, closes the
// sockets whose deadline has passed while an operation was pending. Its timer is set for the
// earliest deadline it knows of and moved only when an earlier one appears, which on a busy
// connection is almost never: each new deadline lies after the one already set.
//
// Single-threaded: a stream, its pending operations and its io_context's sweeper are used from
// the one thread that runs that io_context (every worker runs its own).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace sandgate::proxy {

class DeadlineSweeper;

namespace detail {

// What a stream's pending operations share with it: it outlives the stream while one is
// pending (a completion may arrive after the stream is gone).
struct DeadlineState {
  explicit DeadlineState(boost::asio::ip::tcp::socket s);
  ~DeadlineState();
  DeadlineState(const DeadlineState&) = delete;
  DeadlineState& operator=(const DeadlineState&) = delete;

  // One more operation is pending: the sweeper watches it when it has a deadline.
  void started();

  boost::asio::ip::tcp::socket socket;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  unsigned pending = 0;
  bool timedOut = false;  // the sweeper closed the socket: every later error is a timeout
  DeadlineSweeper& sweeper;
  // The sweeper's list of streams that may have a pending operation under a deadline.
  DeadlineState* prev = nullptr;
  DeadlineState* next = nullptr;
  bool linked = false;
};

// The caller's completion handler, told error::timeout instead of whatever the closed socket
// reported once the deadline has closed it. Its executor, allocator and cancellation slot are
// the caller's (see the associator below).
template <class Handler>
struct DeadlineHandler {
  std::shared_ptr<DeadlineState> state;
  Handler handler;

  template <class... Rest>
  void operator()(boost::system::error_code ec, Rest&&... rest) {
    std::shared_ptr<DeadlineState> s = std::move(state);
    --s->pending;
    if (ec && s->timedOut) ec = boost::beast::error::timeout;
    std::move(handler)(ec, std::forward<Rest>(rest)...);
  }
};

}  // namespace detail

// Closes the sockets of its io_context whose deadline passed while an operation was pending.
class DeadlineSweeper : public boost::asio::execution_context::service {
 public:
  using Clock = std::chrono::steady_clock;
  static boost::asio::execution_context::id id;

  explicit DeadlineSweeper(boost::asio::io_context& io);

  // `s` has a pending operation under a deadline (again, or an earlier one).
  void track(detail::DeadlineState& s);
  void untrack(detail::DeadlineState& s);

  // How many streams are watched now (tests).
  size_t watched() const { return watched_; }

 private:
  void shutdown() override;
  void arm(Clock::time_point at);
  void sweep();

  boost::asio::steady_timer timer_;
  bool armed_ = false;
  uint64_t armGeneration_ = 0;
  detail::DeadlineState* head_ = nullptr;
  size_t watched_ = 0;
};

class DeadlineStream {
 public:
  using executor_type = boost::asio::any_io_executor;
  using socket_type = boost::asio::ip::tcp::socket;
  using lowest_layer_type = socket_type;  // what asio's TLS stream asks of its next layer

  explicit DeadlineStream(socket_type socket);
  explicit DeadlineStream(const executor_type& ex);
  // Closes the socket, like Beast's streams: pending operations end with operation_aborted.
  ~DeadlineStream();
  DeadlineStream(DeadlineStream&&) noexcept = default;
  DeadlineStream& operator=(DeadlineStream&& other) noexcept;

  executor_type get_executor() { return state_->socket.get_executor(); }
  socket_type& socket() { return state_->socket; }
  socket_type& lowest_layer() { return state_->socket; }
  // The deadline passed with an operation pending and closed the socket.
  bool timedOut() const { return state_->timedOut; }
  // Hands the socket over; the stream keeps a closed one.
  socket_type release_socket();

  // Operations pending now and started later must complete within `d`.
  template <class Rep, class Period>
  void expires_after(std::chrono::duration<Rep, Period> d) {
    setDeadline(DeadlineSweeper::Clock::now() +
                std::chrono::duration_cast<DeadlineSweeper::Clock::duration>(d));
  }
  void expires_never();
  void cancel();
  void close();

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return start(buffers, std::forward<Token>(token),
                 [](socket_type& s, const auto& b, auto h) { s.async_read_some(b, std::move(h)); });
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return start(buffers, std::forward<Token>(token), [](socket_type& s, const auto& b, auto h) {
      s.async_write_some(b, std::move(h));
    });
  }

  // Waits until the socket is readable or writable, under the deadline like a read or write.
  template <class Token>
  auto async_wait(socket_type::wait_type w, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [w](auto handler, std::shared_ptr<detail::DeadlineState> s) {
          s->started();
          socket_type& socket = s->socket;
          socket.async_wait(w, detail::DeadlineHandler<std::decay_t<decltype(handler)>>{
                                   std::move(s), std::move(handler)});
        },
        token, state_);
  }

 private:
  void setDeadline(DeadlineSweeper::Clock::time_point at);

  // Starts `op` (a read or write on the socket) as one more pending operation of this stream.
  template <class Buffers, class Token, class Op>
  auto start(const Buffers& buffers, Token&& token, Op op) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [op](auto handler, std::shared_ptr<detail::DeadlineState> s, const Buffers& b) {
          s->started();
          socket_type& socket = s->socket;
          op(socket, b,
             detail::DeadlineHandler<std::decay_t<decltype(handler)>>{std::move(s),
                                                                      std::move(handler)});
        },
        token, state_, buffers);
  }

  std::shared_ptr<detail::DeadlineState> state_;
};

}  // namespace sandgate::proxy

// The wrapped handler keeps the caller's associated executor, allocator and cancellation slot.
template <template <class, class> class Associator, class Handler, class Default>
struct boost::asio::associator<Associator, sandgate::proxy::detail::DeadlineHandler<Handler>,
                               Default> {
  using type = typename Associator<Handler, Default>::type;
  static type get(const sandgate::proxy::detail::DeadlineHandler<Handler>& h) noexcept {
    return Associator<Handler, Default>::get(h.handler);
  }
  static auto get(const sandgate::proxy::detail::DeadlineHandler<Handler>& h,
                  const Default& d) noexcept
      -> decltype(Associator<Handler, Default>::get(h.handler, d)) {
    return Associator<Handler, Default>::get(h.handler, d);
  }
};
