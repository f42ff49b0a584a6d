// The worker loop (proxy/server/worker_loop.h): the adaptive spin's rules, and runWorker behaving
// like io_context::run() — it runs every handler, returns once out of work or stopped, and lets
// exceptions through — with and without a spin.
#include "proxy/server/worker_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace sandgate::proxy {
namespace {

namespace asio = boost::asio;
using std::chrono::microseconds;

TEST(IdleSpin, StartsAtTheLimitAndKeepsItWhileGapsAreCaught) {
  IdleSpin spin(microseconds(100));
  EXPECT_EQ(spin.window(), microseconds(100));
  for (int i = 0; i < 10; ++i) spin.afterIdle(microseconds(30));
  EXPECT_EQ(spin.window(), microseconds(100));
}

TEST(IdleSpin, LongGapsShrinkItToNothing) {
  IdleSpin spin(microseconds(100));
  spin.afterIdle(microseconds(5000));
  EXPECT_EQ(spin.window(), microseconds(50));
  spin.afterIdle(microseconds(5000));
  EXPECT_EQ(spin.window(), microseconds(25));
  spin.afterIdle(microseconds(5000));
  EXPECT_EQ(spin.window(), std::chrono::nanoseconds(12500));
  spin.afterIdle(microseconds(5000));  // below limit / 8: off, not halved forever
  EXPECT_EQ(spin.window(), IdleSpin::Duration::zero());
  spin.afterIdle(microseconds(5000));
  EXPECT_EQ(spin.window(), IdleSpin::Duration::zero());
}

TEST(IdleSpin, GapsWithinTheLimitGrowItBack) {
  IdleSpin spin(microseconds(100));
  for (int i = 0; i < 5; ++i) spin.afterIdle(std::chrono::milliseconds(10));
  ASSERT_EQ(spin.window(), IdleSpin::Duration::zero());
  spin.afterIdle(microseconds(60));  // a spin of the limit would have caught it
  EXPECT_EQ(spin.window(), std::chrono::nanoseconds(12500));  // limit / 8
  spin.afterIdle(microseconds(60));
  EXPECT_EQ(spin.window(), microseconds(25));
  spin.afterIdle(microseconds(60));
  spin.afterIdle(microseconds(60));
  EXPECT_EQ(spin.window(), microseconds(100));
  spin.afterIdle(microseconds(60));
  EXPECT_EQ(spin.window(), microseconds(100));  // never beyond the limit
}

TEST(IdleSpin, ZeroLimitNeverSpins) {
  IdleSpin spin(IdleSpin::Duration::zero());
  spin.afterIdle(microseconds(1));
  EXPECT_EQ(spin.window(), IdleSpin::Duration::zero());
  spin.afterIdle(microseconds(1000));
  EXPECT_EQ(spin.window(), IdleSpin::Duration::zero());
}

class RunWorker : public ::testing::TestWithParam<int> {
 protected:
  microseconds spin() const { return microseconds(GetParam()); }
};

// Handlers posted from the loop itself, a timer that fires while the loop is idle (it blocks
// or spins first), and a post from another thread are all run; the loop then returns because
// nothing is left to do.
TEST_P(RunWorker, RunsEverythingAndReturnsWhenOutOfWork) {
  asio::io_context io{1};
  std::atomic<int> ran{0};
  asio::steady_timer timer(io, std::chrono::milliseconds(20));
  timer.async_wait([&](boost::system::error_code ec) {
    if (!ec) ++ran;
    asio::post(io, [&] { ++ran; });
  });
  asio::post(io, [&] { ++ran; });
  auto guard = asio::make_work_guard(io);
  // Before the thread starts: its 40 ms begin after t0, so the loop cannot return sooner.
  const auto t0 = std::chrono::steady_clock::now();
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    asio::post(io, [&] {
      ++ran;
      guard.reset();
    });
  });
  runWorker(io, spin());
  other.join();
  EXPECT_EQ(ran.load(), 4);
  EXPECT_TRUE(io.stopped());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(40));
}

TEST_P(RunWorker, StopEndsAnIdleLoop) {
  asio::io_context io{1};
  auto guard = asio::make_work_guard(io);  // never out of work: only stop() ends it
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    io.stop();
  });
  runWorker(io, spin());
  other.join();
  EXPECT_TRUE(io.stopped());
}

TEST_P(RunWorker, ExceptionsFromHandlersPropagate) {
  asio::io_context io{1};
  asio::post(io, [] { throw std::runtime_error("boom"); });
  EXPECT_THROW(runWorker(io, spin()), std::runtime_error);
}

INSTANTIATE_TEST_SUITE_P(Spin, RunWorker, ::testing::Values(0, 100, 10000), [](const auto& info) {
  return "spin" + std::to_string(info.param) + "us";
});

}  // namespace
}  // namespace sandgate::proxy
