// budget/leased_counter.h: small takes answered from a lease this replica holds (one round trip
// per block, not per request), replicas together never admitting past a limit, leases given
// back when idle or gone, room checks from a fresh read, and no lease made from a guess.
#include "budget/leased_counter.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "budget/local_counter.h"
#include "budget/meter.h"
#include "budget/observed_counter.h"

namespace sandgate::budget {
namespace {

using Status = TakeResult::Status;
using std::chrono::milliseconds;

// The shared store every replica talks to (one LocalCounter), counting the round trips each
// replica makes to it; it waits, as Redis does, and can be made to fail open.
struct Store {
  LocalCounter counter;
};

class RoundTrips final : public Counter {
 public:
  explicit RoundTrips(std::shared_ptr<Store> store) : store_(std::move(store)) {}
  TakeResult tryAdd(std::string_view key, int64_t amount, int64_t limit,
                    int64_t expiresAt) override {
    ++takes;
    if (down) {
      ++opened;
      return {Status::kTaken, 0};
    }
    return store_->counter.tryAdd(key, amount, limit, expiresAt);
  }
  bool add(std::string_view key, int64_t amount, int64_t expiresAt) override {
    ++adds;
    return store_->counter.add(key, amount, expiresAt);
  }
  std::optional<int64_t> get(std::string_view key) override {
    ++gets;
    return store_->counter.get(key);
  }
  uint64_t failedOpen() const override { return opened; }
  bool waits() const override { return true; }
  int takes = 0;
  int adds = 0;
  int gets = 0;
  bool down = false;
  uint64_t opened = 0;

 private:
  std::shared_ptr<Store> store_;
};

struct FakeClock {
  std::chrono::steady_clock::time_point now{};
  LeasedCounter::Clock fn() {
    return [this] { return now; };
  }
};

LeasedCounter::Options options() {
  LeasedCounter::Options o;
  o.share = 10;  // a lease is a tenth of the limit
  o.idle = milliseconds(1000);
  o.readFresh = milliseconds(50);
  return o;
}

TEST(LeasedCounter, SmallTakesAreAnsweredFromALeaseOneRoundTripPerBlock) {
  auto store = std::make_shared<Store>();
  auto trips = std::make_shared<RoundTrips>(store);
  FakeClock clock;
  LeasedCounter c(trips, options(), clock.fn());
  for (int i = 0; i < 100; ++i) ASSERT_EQ(c.tryAdd("k", 1, 1000, 0).status, Status::kTaken);
  EXPECT_EQ(trips->takes, 1);  // one block of 100
  EXPECT_EQ(c.leased("k"), 0);
  EXPECT_EQ(store->counter.get("k"), 100);
  // Without a lease left, tryAddNow would wait: nothing is taken.
  EXPECT_EQ(c.tryAddNow("k", 1, 1000, 0), std::nullopt);
  EXPECT_EQ(store->counter.get("k"), 100);
  EXPECT_EQ(c.tryAdd("k", 1, 1000, 0).status, Status::kTaken);
  EXPECT_EQ(trips->takes, 2);
  auto now = c.tryAddNow("k", 1, 1000, 0);
  ASSERT_TRUE(now);
  EXPECT_EQ(now->status, Status::kTaken);
  EXPECT_EQ(now->used, 102);  // the store's 200 less the 98 this replica holds unused
  EXPECT_EQ(trips->takes, 2);
}

TEST(LeasedCounter, ReplicasTogetherNeverAdmitPastTheLimit) {
  auto store = std::make_shared<Store>();
  FakeClock clock;
  auto tripsA = std::make_shared<RoundTrips>(store);
  auto tripsB = std::make_shared<RoundTrips>(store);
  LeasedCounter a(tripsA, options(), clock.fn());
  LeasedCounter b(tripsB, options(), clock.fn());
  int admitted = 0;
  // Uneven: a takes three for each of b's, until both are refused.
  for (int i = 0; i < 400; ++i) {
    LeasedCounter& r = (i % 4 == 3) ? b : a;
    if (r.tryAdd("k", 1, 95, 0).status == Status::kTaken) ++admitted;
  }
  EXPECT_EQ(admitted, 95);
  EXPECT_EQ(store->counter.get("k"), 95);
  EXPECT_EQ(a.leased("k") + b.leased("k"), 0);
}

TEST(LeasedCounter, AnIdleLeaseGoesBackSoAnotherReplicaIsNotRefusedLong) {
  auto store = std::make_shared<Store>();
  FakeClock clock;
  LeasedCounter a(std::make_shared<RoundTrips>(store), options(), clock.fn());
  LeasedCounter b(std::make_shared<RoundTrips>(store), options(), clock.fn());
  ASSERT_EQ(a.tryAdd("k", 1, 100, 0).status, Status::kTaken);
  EXPECT_EQ(a.leased("k"), 9);  // the bound: one lease, limit / share
  for (int i = 0; i < 90; ++i) ASSERT_EQ(b.tryAdd("k", 1, 100, 0).status, Status::kTaken);
  // 91 used, 9 held by a: b is refused though the budget has 9 left.
  EXPECT_EQ(b.tryAdd("k", 1, 100, 0).status, Status::kOver);
  clock.now += milliseconds(999);
  a.sweep();
  EXPECT_EQ(a.leased("k"), 9);
  clock.now += milliseconds(1);
  a.sweep();
  EXPECT_EQ(a.leased("k"), 0);
  EXPECT_EQ(store->counter.get("k"), 91);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(b.tryAdd("k", 1, 100, 0).status, Status::kTaken) << i;
  EXPECT_EQ(b.tryAdd("k", 1, 100, 0).status, Status::kOver);
  EXPECT_EQ(store->counter.get("k"), 100);
}

TEST(LeasedCounter, GiveBacksGoToTheLeaseAndEveryLeaseGoesBackAtTheEnd) {
  auto store = std::make_shared<Store>();
  auto trips = std::make_shared<RoundTrips>(store);
  FakeClock clock;
  {
    LeasedCounter c(trips, options(), clock.fn());
    ASSERT_EQ(c.tryAdd("k", 3, 100, 0).status, Status::kTaken);
    EXPECT_EQ(c.leased("k"), 7);
    EXPECT_TRUE(c.add("k", -2, 0));  // a refused request's take
    EXPECT_EQ(c.leased("k"), 9);
    EXPECT_EQ(trips->adds, 0);
    EXPECT_TRUE(c.add("k", -5, 0));  // more than a lease: the excess goes to the store
    EXPECT_EQ(c.leased("k"), 10);
    EXPECT_EQ(store->counter.get("k"), 6);
    EXPECT_TRUE(c.add("k", 4, 0));  // a settle over a reserve goes to the store
    EXPECT_EQ(store->counter.get("k"), 10);
  }
  EXPECT_EQ(store->counter.get("k"), 0);  // the unused lease went back with the counter
}

TEST(LeasedCounter, LargeTakesAndTakesNearTheLimitAreExact) {
  auto store = std::make_shared<Store>();
  auto trips = std::make_shared<RoundTrips>(store);
  FakeClock clock;
  LeasedCounter c(trips, options(), clock.fn());
  EXPECT_EQ(c.tryAdd("k", 50, 100, 0).status, Status::kTaken);  // over a lease: exact
  EXPECT_EQ(c.leased("k"), 0);
  EXPECT_EQ(c.tryAddNow("k", 50, 100, 0), std::nullopt);
  ASSERT_TRUE(store->counter.add("k", 45, 0));  // other replicas: 95 used
  EXPECT_EQ(c.tryAdd("k", 4, 100, 0).status, Status::kTaken);  // no room for a block of 10
  EXPECT_EQ(c.leased("k"), 0);
  const TakeResult over = c.tryAdd("k", 2, 100, 0);
  EXPECT_EQ(over.status, Status::kOver);
  EXPECT_EQ(over.used, 99);
  EXPECT_EQ(c.tryAdd("k", 1, 100, 0).status, Status::kTaken);
  EXPECT_EQ(store->counter.get("k"), 100);
}

TEST(LeasedCounter, AFailOpenGuessMakesNoLease) {
  auto store = std::make_shared<Store>();
  auto trips = std::make_shared<RoundTrips>(store);
  FakeClock clock;
  LeasedCounter c(trips, options(), clock.fn());
  trips->down = true;
  const uint64_t before = c.failedOpen();
  EXPECT_EQ(c.tryAdd("k", 1, 100, 0).status, Status::kTaken);
  EXPECT_EQ(c.failedOpen(), before + 1);  // the caller audits it
  EXPECT_EQ(c.leased("k"), 0);
  EXPECT_EQ(c.tryAddNow("k", 1, 100, 0), std::nullopt);
}

TEST(LeasedCounter, ALeaseTakenUnderAnotherLimitIsGivenBack) {
  auto store = std::make_shared<Store>();
  FakeClock clock;
  LeasedCounter c(std::make_shared<RoundTrips>(store), options(), clock.fn());
  ASSERT_EQ(c.tryAdd("k", 1, 1000, 0).status, Status::kTaken);
  EXPECT_EQ(c.leased("k"), 99);
  // A reload lowered the limit: the old lease hands nothing out under the new one.
  EXPECT_EQ(c.tryAddNow("k", 1, 10, 0), std::nullopt);
  EXPECT_EQ(c.tryAdd("k", 1, 10, 0).status, Status::kTaken);
  EXPECT_EQ(c.leased("k"), 0);  // a lease of 1 under a limit of 10
  EXPECT_EQ(store->counter.get("k"), 2);
}

TEST(LeasedCounter, RoomChecksAnswerFromAFreshReadAndItsSettles) {
  auto store = std::make_shared<Store>();
  auto trips = std::make_shared<RoundTrips>(store);
  FakeClock clock;
  LeasedCounter c(trips, options(), clock.fn());
  ASSERT_TRUE(store->counter.add("b", 40, 0));
  EXPECT_EQ(c.getNow("b"), std::nullopt);
  EXPECT_EQ(c.get("b"), 40);
  EXPECT_EQ(trips->gets, 1);
  EXPECT_EQ(c.getNow("b"), 40);
  EXPECT_TRUE(c.add("b", 5, 0));  // this replica's settle counts at once
  EXPECT_EQ(c.getNow("b"), 45);
  clock.now += milliseconds(51);
  EXPECT_EQ(c.getNow("b"), std::nullopt);
  EXPECT_EQ(trips->gets, 1);
}

TEST(LeasedCounter, AdmitNowStopsWithoutTakingAndAdmitsFromLeases) {
  auto store = std::make_shared<Store>();
  FakeClock clock;
  auto leased = std::make_shared<LeasedCounter>(std::make_shared<RoundTrips>(store), options(),
                                                clock.fn());
  ObservedCounter c(leased);  // as serve builds it: the forwarding is part of what is tested
  config::Budget requests;
  requests.name = "r";
  requests.window = config::BudgetWindow::kRun;
  requests.requests = 100;
  config::Budget bytes = requests;
  bytes.name = "b";
  bytes.requests.reset();
  bytes.responseBytes = 1000;
  const std::vector<config::Budget> budgets = {requests, bytes};
  Admission admission;
  // Nothing leased or read yet: it would wait, and nothing is taken.
  EXPECT_EQ(admitNow(c, "t", budgets, 0, std::nullopt, admission), std::nullopt);
  EXPECT_TRUE(admission.held.empty());
  const std::string key = counterKey("t", requests, 0, Metric::kRequests);
  EXPECT_EQ(store->counter.get(key), 0);
  ASSERT_EQ(admit(c, "t", budgets, 0, std::nullopt, admission), std::nullopt);
  EXPECT_EQ(leased->leased(key), 9);
  // The read of the byte budget is stale: the request budget's take from the lease is given
  // back to it.
  clock.now += milliseconds(51);
  EXPECT_EQ(admitNow(c, "t", budgets, 0, std::nullopt, admission), std::nullopt);
  EXPECT_EQ(leased->leased(key), 9);
  ASSERT_EQ(admit(c, "t", budgets, 0, std::nullopt, admission), std::nullopt);
  EXPECT_EQ(leased->leased(key), 8);
  auto now = admitNow(c, "t", budgets, 0, std::nullopt, admission);
  ASSERT_TRUE(now);
  EXPECT_EQ(*now, std::nullopt);
  EXPECT_EQ(admission.held.size(), 1u);
  EXPECT_EQ(leased->leased(key), 7);
  EXPECT_EQ(c.peek(key), 3);  // the gauges see what the lease answered: 10 taken, 7 unused
  EXPECT_EQ(store->counter.get(key), 10);
}

// Growth per event: task names come from tokens, so the leases and reads kept are bounded;
// past the bound a take is counted exactly, never refused for want of room here.
TEST(LeasedCounter, LeasesAndReadsAreBoundedAndTakesPastTheBoundAreExact) {
  auto store = std::make_shared<Store>();
  auto trips = std::make_shared<RoundTrips>(store);
  FakeClock clock;
  LeasedCounter::Options o = options();
  o.maxKeys = 2;
  LeasedCounter c(trips, o, clock.fn());
  ASSERT_EQ(c.tryAdd("a", 1, 100, 0).status, Status::kTaken);
  ASSERT_EQ(c.get("b"), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.tryAdd("c", 1, 100, 0).status, Status::kTaken);
  EXPECT_EQ(c.leased("c"), 0);
  EXPECT_EQ(trips->takes, 1 + 3);  // a's block, then c exactly, each take
  EXPECT_EQ(store->counter.get("c"), 3);
  // Once a's lease has gone idle and been given back, there is room again.
  clock.now += milliseconds(1000);
  c.sweep();
  EXPECT_EQ(store->counter.get("a"), 1);
  ASSERT_EQ(c.tryAdd("c", 1, 100, 0).status, Status::kTaken);
  EXPECT_EQ(c.leased("c"), 9);
}

TEST(LeasedCounter, ASweeperThreadGivesIdleLeasesBack) {
  auto store = std::make_shared<Store>();
  LeasedCounter::Options o = options();
  o.idle = milliseconds(20);
  o.sweepEvery = milliseconds(10);
  LeasedCounter c(std::make_shared<RoundTrips>(store), o);
  ASSERT_EQ(c.tryAdd("k", 1, 100, 0).status, Status::kTaken);
  EXPECT_EQ(store->counter.get("k"), 10);
  for (int i = 0; i < 200 && c.leased("k") > 0; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(c.leased("k"), 0);
  EXPECT_EQ(store->counter.get("k"), 1);
}

}  // namespace
}  // namespace sandgate::budget
