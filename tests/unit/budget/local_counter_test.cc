// budget/local_counter.h: add-unless-over is atomic, counters never wrap or go negative,
// expired keys start again, and the key count is bounded.
#include "budget/local_counter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <thread>
#include <vector>

namespace sandgate::budget {
namespace {

using Status = TakeResult::Status;

TEST(LocalCounter, TakesUpToTheLimitAndNoFurther) {
  LocalCounter c;
  EXPECT_EQ(c.tryAdd("k", 3, 5, 0).status, Status::kTaken);
  auto r = c.tryAdd("k", 3, 5, 0);
  EXPECT_EQ(r.status, Status::kOver);
  EXPECT_EQ(r.used, 3);
  EXPECT_EQ(c.tryAdd("k", 2, 5, 0).status, Status::kTaken);
  EXPECT_EQ(c.get("k"), 5);
  EXPECT_EQ(c.tryAdd("k", 1, 5, 0).status, Status::kOver);
}

TEST(LocalCounter, HugeAmountsNeitherWrapNorGoNegative) {
  LocalCounter c;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // An amount as large as a hostile Content-Length is over, not a wrap to a small value.
  EXPECT_EQ(c.tryAdd("k", kMax, 10, 0).status, Status::kOver);
  EXPECT_TRUE(c.add("k", kMax, 0));
  EXPECT_TRUE(c.add("k", kMax, 0));
  EXPECT_EQ(c.get("k"), kMax);  // saturates
  EXPECT_TRUE(c.add("j", -5, 0));
  EXPECT_EQ(c.get("j"), 0);  // a settle below zero stops at zero
}

TEST(LocalCounter, ConcurrentTakersNeverPassTheLimit) {
  LocalCounter c;
  std::atomic<int> taken{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (c.tryAdd("k", 1, 500, 0).status == Status::kTaken) ++taken;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(taken.load(), 500);
  EXPECT_EQ(c.get("k"), 500);
}

TEST(LocalCounter, AnExpiredKeyStartsAgain) {
  int64_t now = 100;
  LocalCounter c(LocalCounter::kDefaultMaxKeys, [&] { return now; });
  EXPECT_EQ(c.tryAdd("k", 5, 5, 160).status, Status::kTaken);
  EXPECT_EQ(c.tryAdd("k", 1, 5, 160).status, Status::kOver);
  now = 160;
  EXPECT_EQ(c.get("k"), 0);
  EXPECT_EQ(c.tryAdd("k", 1, 5, 220).status, Status::kTaken);
  EXPECT_EQ(c.get("k"), 1);
}

TEST(LocalCounter, BoundedKeysSweepExpiredThenRefuse) {
  int64_t now = 100;
  LocalCounter c(LocalCounter::kShards * 2, [&] { return now; });
  int refused = 0;
  for (int i = 0; i < 1000; ++i) {
    if (c.tryAdd("k" + std::to_string(i), 1, 10, 150).status == Status::kUnavailable) ++refused;
  }
  EXPECT_GT(refused, 0);
  EXPECT_LE(c.size(), LocalCounter::kShards * 2);
  now = 200;  // every key has expired: room again
  EXPECT_EQ(c.tryAdd("fresh", 1, 10, 0).status, Status::kTaken);
}

}  // namespace
}  // namespace sandgate::budget
