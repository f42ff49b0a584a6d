// budget/observed_counter.h: peek() answers what the replica last saw of a shared store, never
// asks it, never takes a fail-open guess for a value, and remembers a bounded number of keys.
#include "budget/observed_counter.h"

#include <gtest/gtest.h>

#include <memory>

#include "budget/local_counter.h"

namespace sandgate::budget {
namespace {

using Status = TakeResult::Status;

// A store other replicas also write to (`shared`), and one that can be made to fail open.
class FakeShared final : public Counter {
 public:
  TakeResult tryAdd(std::string_view key, int64_t amount, int64_t limit,
                    int64_t expiresAt) override {
    ++calls;
    if (down) return guess();
    return shared.tryAdd(key, amount, limit, expiresAt);
  }
  bool add(std::string_view key, int64_t amount, int64_t expiresAt) override {
    ++calls;
    return shared.add(key, amount, expiresAt);
  }
  std::optional<int64_t> get(std::string_view key) override {
    ++calls;
    if (down) return guess().used;
    return shared.get(key);
  }
  uint64_t failedOpen() const override { return opened; }
  TakeResult guess() {
    ++opened;
    return {Status::kTaken, 0};
  }
  LocalCounter shared;
  bool down = false;
  uint64_t opened = 0;
  int calls = 0;
};

TEST(ObservedCounter, PeekIsWhatThisReplicaLastSawWithoutAsking) {
  auto store = std::make_shared<FakeShared>();
  ObservedCounter c(store);
  EXPECT_EQ(c.peek("k"), std::nullopt);
  EXPECT_EQ(c.tryAdd("k", 2, 10, 0).status, Status::kTaken);
  EXPECT_EQ(c.peek("k"), 2);
  store->shared.add("k", 5, 0);  // another replica's requests
  const int calls = store->calls;
  EXPECT_EQ(c.peek("k"), 2);  // not seen yet, and not asked for
  EXPECT_EQ(store->calls, calls);
  EXPECT_EQ(c.tryAdd("k", 1, 10, 0).used, 8);
  EXPECT_EQ(c.peek("k"), 8);
  EXPECT_TRUE(c.add("k", 3, 0));  // this replica's own settle
  EXPECT_EQ(c.peek("k"), 11);
  EXPECT_EQ(c.get("r"), 0);
  EXPECT_EQ(c.peek("r"), 0);
  EXPECT_TRUE(c.add("unseen", 4, 0));  // a settle says nothing of a total never read
  EXPECT_EQ(c.peek("unseen"), std::nullopt);
}

TEST(ObservedCounter, AnOverAnswerIsSeenAndAFailOpenGuessIsNot) {
  auto store = std::make_shared<FakeShared>();
  ObservedCounter c(store);
  c.tryAdd("k", 4, 5, 0);
  auto over = c.tryAdd("k", 4, 5, 0);
  EXPECT_EQ(over.status, Status::kOver);
  EXPECT_EQ(c.peek("k"), 4);
  store->down = true;
  EXPECT_EQ(c.tryAdd("k", 1, 5, 0).status, Status::kTaken);  // admitted uncounted
  EXPECT_EQ(c.get("k"), 0);
  EXPECT_EQ(c.peek("k"), 4);  // not the guess of 0
  EXPECT_EQ(c.failedOpen(), 2u);
}

TEST(ObservedCounter, RemembersABoundedNumberOfKeys) {
  int64_t now = 1000;
  auto store = std::make_shared<FakeShared>();
  ObservedCounter c(store, 2, [&] { return now; });
  c.tryAdd("a", 1, 9, 0);
  c.tryAdd("b", 1, 9, 0);
  c.tryAdd("c", 1, 9, 0);  // full: admitted, not remembered
  EXPECT_EQ(c.peek("c"), std::nullopt);
  EXPECT_EQ(c.tryAdd("a", 1, 9, 0).used, 2);
  EXPECT_EQ(c.peek("a"), 2);                 // a remembered key is still updated
  now += ObservedCounter::kForgetAfter + 1;  // a and b are forgotten when room is needed
  c.tryAdd("c", 1, 9, 0);
  EXPECT_EQ(c.peek("c"), 2);
}

TEST(LocalCounterPeek, IsTheCountItself) {
  LocalCounter c;
  EXPECT_EQ(c.peek("k"), 0);
  c.tryAdd("k", 3, 9, 0);
  EXPECT_EQ(c.peek("k"), 3);
}

}  // namespace
}  // namespace sandgate::budget
