// Per-task admission counters and the connection-rate bucket (proxy/state/task_limits.h).
#include "proxy/state/task_limits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

namespace sandgate::proxy {
namespace {

using namespace std::chrono_literals;

TEST(TaskLimits, ConnectionSlotsAreBoundedAndReleased) {
  auto s = std::make_shared<TaskState>();
  {
    TaskSlot a, b;
    ASSERT_TRUE(s->tryAcquireConnection(2));
    a = TaskSlot(s, TaskSlot::Kind::kConnection);
    ASSERT_TRUE(s->tryAcquireConnection(2));
    b = TaskSlot(s, TaskSlot::Kind::kConnection);
    EXPECT_FALSE(s->tryAcquireConnection(2));
    EXPECT_EQ(s->connections(), 2u);
  }
  EXPECT_EQ(s->connections(), 0u);
  EXPECT_TRUE(s->tryAcquireTunnel(1));
  EXPECT_FALSE(s->tryAcquireTunnel(1));
  s->releaseTunnel();
  EXPECT_EQ(s->tunnels(), 0u);
}

TEST(TaskLimits, ConcurrentAcquireNeverExceedsMax) {
  auto s = std::make_shared<TaskState>();
  std::atomic<int> got{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (s->tryAcquireConnection(10)) got.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(got.load(), 10);
  EXPECT_EQ(s->connections(), 10u);
}

TEST(TaskLimits, RateBucketAllowsBurstThenRefills) {
  TaskState s;
  auto t0 = std::chrono::steady_clock::time_point(100s);
  int allowed = 0;
  for (int i = 0; i < 20; ++i) allowed += s.tryTakeConnectionToken(5, t0) ? 1 : 0;
  EXPECT_EQ(allowed, 5);  // burst of one second's worth
  EXPECT_FALSE(s.tryTakeConnectionToken(5, t0 + 100ms));
  EXPECT_TRUE(s.tryTakeConnectionToken(5, t0 + 200ms));  // one token per 200 ms
  EXPECT_FALSE(s.tryTakeConnectionToken(5, t0 + 200ms));
}

TEST(TaskLimits, FractionalRate) {
  TaskState s;
  auto t0 = std::chrono::steady_clock::time_point(100s);
  EXPECT_TRUE(s.tryTakeConnectionToken(0.5, t0));
  EXPECT_FALSE(s.tryTakeConnectionToken(0.5, t0 + 1s));
  EXPECT_TRUE(s.tryTakeConnectionToken(0.5, t0 + 2s));
}

TEST(TaskLimits, RegistryKeepsStatePerName) {
  TaskRegistry r;
  auto a = r.get("a");
  EXPECT_EQ(a, r.get("a"));
  EXPECT_NE(a, r.get("b"));
}

// Ad-hoc tasks' states are kept while held or unexpired and dropped afterwards, so that the
// number kept follows the tokens in use and not every name ever minted.
TEST(TaskLimits, AdHocStatesAreDroppedOnceExpiredAndUnheld) {
  AdhocTaskStates states;
  auto held = states.get("held", 100, 0);
  auto later = states.get("later", 5000, 0);
  EXPECT_EQ(states.get("held", 50, 0), held);  // the same task: the same counts
  for (int i = 0; i < 200; ++i) states.get("gone-" + std::to_string(i), 100, 1000);
  // Sweeps ran on the way (at 64 and 128 entries): every expired, unheld task is gone.
  EXPECT_LT(states.size(), 200u);
  auto names = states.list();
  auto has = [&](const std::string& n) {
    return std::any_of(names.begin(), names.end(), [&](const auto& e) { return e.first == n; });
  };
  EXPECT_TRUE(has("held"));   // expired, but a connection holds it
  EXPECT_TRUE(has("later"));  // not expired
  EXPECT_EQ(states.get("later", 0, 1000), later);
}

}  // namespace
}  // namespace sandgate::proxy
