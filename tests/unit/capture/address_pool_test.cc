// Tests for capture/address_pool.cc: stable, unique assignment, reverse lookup, exhaustion.
#include "capture/address_pool.h"

#include <gtest/gtest.h>

#include <set>

namespace sandgate::capture {
namespace {

TEST(SyntheticPool, DefaultRanges) {
  EXPECT_FALSE(checkPoolRanges(defaultPoolV4(), defaultPoolV6()));
  SyntheticPool pool(defaultPoolV4(), defaultPoolV6());
  EXPECT_EQ(pool.capacity(), (1u << 17) - 2);
  auto a = pool.assign("api.test");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->v4.str(), "198.18.0.1");
  EXPECT_EQ(a->v6.str(), "fd53:4744:4e53::1");
}

TEST(SyntheticPool, StableAndNeverShared) {
  SyntheticPool pool(defaultPoolV4(), defaultPoolV6());
  std::set<std::string> v4, v6;
  for (int i = 0; i < 1000; ++i) {
    auto a = pool.assign("host" + std::to_string(i) + ".test");
    ASSERT_TRUE(a);
    EXPECT_TRUE(v4.insert(a->v4.str()).second) << i;
    EXPECT_TRUE(v6.insert(a->v6.str()).second) << i;
  }
  auto again = pool.assign("host7.test");
  auto first = pool.assign("host7.test");
  EXPECT_EQ(again->v4, first->v4);
  EXPECT_EQ(pool.size(), 1000u);
  // Past a byte boundary: 198.18.1.x
  EXPECT_EQ(pool.assign("host300.test")->v4.str(), "198.18.1.45");
}

TEST(SyntheticPool, ReverseLookup) {
  SyntheticPool pool(defaultPoolV4(), defaultPoolV6());
  auto a = pool.assign("a.test");
  auto b = pool.assign("b.test");
  EXPECT_EQ(pool.nameOf(a->v4), "a.test");
  EXPECT_EQ(pool.nameOf(b->v6), "b.test");
  EXPECT_EQ(pool.nameOf(*policy::parseIp("::ffff:198.18.0.2")), "b.test");
  EXPECT_FALSE(pool.nameOf(*policy::parseIp("198.18.0.3")));  // in range, not assigned
  EXPECT_FALSE(pool.nameOf(*policy::parseIp("198.18.0.0")));  // never handed out
  EXPECT_FALSE(pool.nameOf(*policy::parseIp("198.19.255.255")));
  EXPECT_FALSE(pool.nameOf(*policy::parseIp("127.0.0.1")));
  EXPECT_FALSE(pool.nameOf(*policy::parseIp("fd53:4744:4e53:1::1")));  // outside the /64
  EXPECT_TRUE(pool.contains(*policy::parseIp("198.19.0.9")));
  EXPECT_FALSE(pool.contains(*policy::parseIp("198.20.0.1")));
}

TEST(SyntheticPool, ExhaustionNeverReuses) {
  SyntheticPool pool(*policy::parseCidr("198.18.0.0/30"), defaultPoolV6());
  EXPECT_EQ(pool.capacity(), 2u);
  EXPECT_TRUE(pool.assign("a.test"));
  EXPECT_TRUE(pool.assign("b.test"));
  EXPECT_FALSE(pool.assign("c.test"));
  EXPECT_TRUE(pool.assign("a.test"));  // known names keep working
  EXPECT_FALSE(pool.nameOf(*policy::parseIp("198.18.0.3")));
}

TEST(SyntheticPool, RangeChecks) {
  EXPECT_TRUE(checkPoolRanges(*policy::parseCidr("10.0.0.0/31"), defaultPoolV6()));
  EXPECT_TRUE(checkPoolRanges(defaultPoolV6(), defaultPoolV6()));
  EXPECT_TRUE(checkPoolRanges(defaultPoolV4(), *policy::parseCidr("fd00::/127")));
}

}  // namespace
}  // namespace sandgate::capture
