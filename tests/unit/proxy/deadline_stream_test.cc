// DeadlineStream (proxy/deadline_stream.h): Beast's timeout contract on real loopback sockets,
// with one sweeper timer per io_context instead of a timer per operation.
#include "proxy/deadline_stream.h"

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

TEST(DeadlineStream, PendingReadPastItsDeadlineTimesOutAndClosesTheSocket) {
  asio::io_context io;
  Pair p(io);
  char byte = 0;
  std::optional<Outcome> read;
  p.stream.expires_after(100ms);
  startRead(p.stream, &byte, read);
  runUntil(io, [&] { return read.has_value(); }, 5s);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->ec, boost::beast::error::timeout) << read->ec.message();
  EXPECT_GE(read->after, 100ms);
  EXPECT_LT(read->after, 2s);
  EXPECT_FALSE(p.stream.socket().is_open());
  EXPECT_EQ(asio::use_service<DeadlineSweeper>(io).watched(), 0u);
}

TEST(DeadlineStream, DeadlineOnlyCountsWhileAnOperationIsPending) {
  asio::io_context io;
  Pair p(io);
  char byte = 0;
  std::optional<Outcome> read;
  p.stream.expires_after(100ms);
  startRead(p.stream, &byte, read);
  asio::write(p.peer, asio::buffer("x", 1));
  runUntil(io, [&] { return read.has_value(); }, 5s);
  ASSERT_TRUE(read.has_value());
  EXPECT_FALSE(read->ec) << read->ec.message();
  // The deadline passes with nothing pending: the connection is left alone.
  io.restart();
  io.run_for(300ms);
  EXPECT_TRUE(p.stream.socket().is_open());
  EXPECT_EQ(asio::use_service<DeadlineSweeper>(io).watched(), 0u);
}

TEST(DeadlineStream, ExpiresNeverLiftsTheDeadlineOfAPendingRead) {
  asio::io_context io;
  Pair p(io);
  char byte = 0;
  std::optional<Outcome> read;
  p.stream.expires_after(100ms);
  startRead(p.stream, &byte, read);
  p.stream.expires_never();
  io.run_for(400ms);
  EXPECT_FALSE(read.has_value());
  asio::write(p.peer, asio::buffer("y", 1));
  runUntil(io, [&] { return read.has_value(); }, 5s);
  ASSERT_TRUE(read.has_value());
  EXPECT_FALSE(read->ec) << read->ec.message();
  EXPECT_EQ(byte, 'y');
}

TEST(DeadlineStream, AnEarlierDeadlineOnAnotherStreamIsNotDelayedByALaterOne) {
  asio::io_context io;
  Pair slow(io), fast(io);
  char b1 = 0, b2 = 0;
  std::optional<Outcome> slowRead, fastRead;
  slow.stream.expires_after(30s);  // the sweeper's timer is set for this one first
  startRead(slow.stream, &b1, slowRead);
  fast.stream.expires_after(100ms);
  startRead(fast.stream, &b2, fastRead);
  runUntil(io, [&] { return fastRead.has_value(); }, 5s);
  ASSERT_TRUE(fastRead.has_value());
  EXPECT_EQ(fastRead->ec, boost::beast::error::timeout);
  EXPECT_LT(fastRead->after, 1s);
  EXPECT_FALSE(slowRead.has_value());
  EXPECT_TRUE(slow.stream.socket().is_open());
  EXPECT_EQ(asio::use_service<DeadlineSweeper>(io).watched(), 1u);  // the slow one
}

TEST(DeadlineStream, DeadlineAlreadyPassedWhenTheReadStarts) {
  asio::io_context io;
  Pair p(io);
  char byte = 0;
  std::optional<Outcome> read;
  p.stream.expires_after(0ms);
  startRead(p.stream, &byte, read);
  runUntil(io, [&] { return read.has_value(); }, 5s);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->ec, boost::beast::error::timeout);
}

TEST(DeadlineStream, WritesAreUnderTheDeadlineToo) {
  asio::io_context io;
  Pair p(io);
  // The peer never reads: once both socket buffers are full the write stays pending.
  std::vector<char> big(64 << 20, 'z');
  std::optional<Outcome> write;
  p.stream.expires_after(200ms);
  asio::async_write(p.stream, asio::buffer(big), [&write](boost::system::error_code ec, size_t n) {
    write = Outcome{ec, n, {}};
  });
  runUntil(io, [&] { return write.has_value(); }, 5s);
  ASSERT_TRUE(write.has_value());
  EXPECT_EQ(write->ec, boost::beast::error::timeout);
  EXPECT_LT(write->n, big.size());
}

TEST(DeadlineStream, DestroyingTheStreamEndsItsPendingRead) {
  asio::io_context io;
  std::optional<Outcome> read;
  char byte = 0;
  {
    Pair p(io);
    p.stream.expires_after(10s);
    startRead(p.stream, &byte, read);
  }
  runUntil(io, [&] { return read.has_value(); }, 5s);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->ec, asio::error::operation_aborted) << read->ec.message();
  EXPECT_EQ(asio::use_service<DeadlineSweeper>(io).watched(), 0u);
}

// The caller's cancellation slot reaches the socket operation: `||` cancels the read that
// lost the race, and that is not reported as a timeout.
TEST(DeadlineStream, CancellationSlotOfTheCallerStillWorks) {
  using namespace asio::experimental::awaitable_operators;
  asio::io_context io;
  Pair p(io);
  std::optional<size_t> winner;
  std::optional<boost::system::error_code> readError;
  p.stream.expires_after(10s);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        char byte = 0;
        asio::steady_timer timer(io, 100ms);
        auto read = [&]() -> asio::awaitable<void> {
          try {
            co_await p.stream.async_read_some(asio::buffer(&byte, 1), asio::use_awaitable);
          } catch (const boost::system::system_error& e) {
            readError = e.code();
          }
        };
        auto race = read() || timer.async_wait(asio::use_awaitable);
        auto r = co_await std::move(race);
        winner = r.index();
      },
      asio::detached);
  runUntil(io, [&] { return winner.has_value(); }, 5s);
  ASSERT_TRUE(winner.has_value());
  EXPECT_EQ(*winner, 1u);
  ASSERT_TRUE(readError.has_value());
  EXPECT_EQ(*readError, asio::error::operation_aborted);
  EXPECT_TRUE(p.stream.socket().is_open());
}

}  // namespace
}  // namespace sandgate::proxy
