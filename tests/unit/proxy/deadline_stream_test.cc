// DeadlineStream (proxy/net/deadline_stream.h): Beast's timeout contract on real loopback sockets,
// with one sweeper timer per io_context instead of a timer per operation.
#include "proxy/net/deadline_stream.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>

namespace sandgate::proxy {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A connected pair of loopback TCP sockets on `io`: ours (in a DeadlineStream) and the peer.
struct Pair {
  explicit Pair(asio::io_context& io) : peer(io), stream(tcp::socket(io)) {
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    stream.socket().connect(acceptor.local_endpoint());
    acceptor.accept(peer);
  }
  tcp::socket peer;
  DeadlineStream stream;
};

struct Outcome {
  boost::system::error_code ec;
  size_t n = 0;
  Clock::duration after{};
};

// Runs `io` until `done()` or `limit` (the sweeper's timer may keep it busy much longer).
template <class Done>
void runUntil(asio::io_context& io, Done done, Clock::duration limit) {
  const auto end = Clock::now() + limit;
  while (!done() && Clock::now() < end) {
    io.restart();
    io.run_for(5ms);
  }
}

// Starts a read of one byte on `s` and records how it ends into `out`.
void startRead(DeadlineStream& s, char* byte, std::optional<Outcome>& out) {
  const auto start = Clock::now();
  s.async_read_some(asio::buffer(byte, 1), [&out, start](boost::system::error_code ec, size_t n) {
    out = Outcome{ec, n, Clock::now() - start};
  });
}

// One io_context and one connected pair; reads of one byte under a deadline.
class DeadlineStreamTest : public ::testing::Test {
 protected:
  // A read on `s` (default: the pair's stream) that must end within `deadline`.
  void read(std::chrono::milliseconds deadline, DeadlineStream* s = nullptr,
            std::optional<Outcome>* out = nullptr) {
    s = s ? s : &p.stream;
    s->expires_after(deadline);
    startRead(*s, &byte, out ? *out : result);
  }
  // Runs the loop until the read has ended (at most 5 s).
  bool ended(std::optional<Outcome>* out = nullptr) {
    auto& r = out ? *out : result;
    runUntil(
        io, [&] { return r.has_value(); }, 5s);
    return r.has_value();
  }
  size_t watched() { return asio::use_service<DeadlineSweeper>(io).watched(); }

  asio::io_context io;
  Pair p{io};
  char byte = 0;
  std::optional<Outcome> result;
};

TEST_F(DeadlineStreamTest, PendingReadPastItsDeadlineTimesOutAndClosesTheSocket) {
  read(100ms);
  ASSERT_TRUE(ended());
  EXPECT_EQ(result->ec, boost::beast::error::timeout) << result->ec.message();
  EXPECT_GE(result->after, 100ms);
  EXPECT_LT(result->after, 2s);
  EXPECT_FALSE(p.stream.socket().is_open());
  EXPECT_EQ(watched(), 0u);
}

TEST_F(DeadlineStreamTest, DeadlineOnlyCountsWhileAnOperationIsPending) {
  read(100ms);
  asio::write(p.peer, asio::buffer("x", 1));
  ASSERT_TRUE(ended());
  EXPECT_FALSE(result->ec) << result->ec.message();
  // The deadline passes with nothing pending: the connection is left alone.
  io.restart();
  io.run_for(300ms);
  EXPECT_TRUE(p.stream.socket().is_open());
  EXPECT_EQ(watched(), 0u);
}

TEST_F(DeadlineStreamTest, ExpiresNeverLiftsTheDeadlineOfAPendingRead) {
  read(100ms);
  p.stream.expires_never();
  io.run_for(400ms);
  EXPECT_FALSE(result.has_value());
  asio::write(p.peer, asio::buffer("y", 1));
  ASSERT_TRUE(ended());
  EXPECT_FALSE(result->ec) << result->ec.message();
  EXPECT_EQ(byte, 'y');
}

TEST_F(DeadlineStreamTest, AnEarlierDeadlineOnAnotherStreamIsNotDelayedByALaterOne) {
  Pair slow(io);
  std::optional<Outcome> slowRead;
  read(30s, &slow.stream, &slowRead);  // the sweeper's timer is set for this one first
  read(100ms);
  ASSERT_TRUE(ended());
  EXPECT_EQ(result->ec, boost::beast::error::timeout);
  EXPECT_LT(result->after, 1s);
  EXPECT_FALSE(slowRead.has_value());
  EXPECT_TRUE(slow.stream.socket().is_open());
  EXPECT_EQ(watched(), 1u);  // the slow one
}

TEST_F(DeadlineStreamTest, DeadlineAlreadyPassedWhenTheReadStarts) {
  read(0ms);
  ASSERT_TRUE(ended());
  EXPECT_EQ(result->ec, boost::beast::error::timeout);
}

TEST_F(DeadlineStreamTest, WritesAreUnderTheDeadlineToo) {
  // The peer never reads: once both socket buffers (kept small, so that no autotuning can
  // make room for all of it) are full, the write stays pending.
  p.peer.set_option(asio::socket_base::receive_buffer_size(64 * 1024));
  p.stream.socket().set_option(asio::socket_base::send_buffer_size(64 * 1024));
  std::vector<char> big(16 << 20, 'z');
  p.stream.expires_after(200ms);
  asio::async_write(p.stream, asio::buffer(big), [this](boost::system::error_code ec, size_t n) {
    result = Outcome{ec, n, {}};
  });
  ASSERT_TRUE(ended());
  EXPECT_EQ(result->ec, boost::beast::error::timeout);
  EXPECT_LT(result->n, big.size());
}

TEST_F(DeadlineStreamTest, DestroyingTheStreamEndsItsPendingRead) {
  {
    Pair other(io);
    read(10s, &other.stream);
  }
  ASSERT_TRUE(ended());
  EXPECT_EQ(result->ec, asio::error::operation_aborted) << result->ec.message();
  EXPECT_EQ(watched(), 0u);
}

// The caller's cancellation slot reaches the socket operation: `||` cancels the read that
// lost the race, and that is not reported as a timeout.
TEST_F(DeadlineStreamTest, CancellationSlotOfTheCallerStillWorks) {
  using namespace asio::experimental::awaitable_operators;
  std::optional<size_t> winner;
  std::optional<boost::system::error_code> readError;
  p.stream.expires_after(10s);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(io, 100ms);
        auto readOne = [&]() -> asio::awaitable<void> {
          try {
            co_await p.stream.async_read_some(asio::buffer(&byte, 1), asio::use_awaitable);
          } catch (const boost::system::system_error& e) {
            readError = e.code();
          }
        };
        auto race = readOne() || timer.async_wait(asio::use_awaitable);
        auto r = co_await std::move(race);
        winner = r.index();
      },
      asio::detached);
  runUntil(
      io, [&] { return winner.has_value(); }, 5s);
  ASSERT_TRUE(winner.has_value());
  EXPECT_EQ(*winner, 1u);
  ASSERT_TRUE(readError.has_value());
  EXPECT_EQ(*readError, asio::error::operation_aborted);
  EXPECT_TRUE(p.stream.socket().is_open());
}

}  // namespace
}  // namespace sandgate::proxy
