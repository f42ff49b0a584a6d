// The per-worker idle connection pools (proxy/net/connection_pool.h): keys, the quiet check on a
// real socket pair, LIFO reuse, expiry and the size limits.
#include "proxy/net/connection_pool.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <thread>

namespace sandgate::proxy {

// A stand-in connection: an id, and whether it still counts as quiet (shared, so a test can
// break a connection while it sits in the pool).
struct FakeConn {
  int id = 0;
  std::shared_ptr<bool> quiet = std::make_shared<bool>(true);
};

template <>
struct PooledConnection<FakeConn> {
  static bool quiet(FakeConn& c) { return *c.quiet; }
};

namespace {

TEST(PoolKey, SeparatesEveryPart) {
  const auto base = poolKey(1, "task", "api.test", 443, "cred");
  EXPECT_EQ(base, poolKey(1, "task", "api.test", 443, "cred"));
  EXPECT_NE(base, poolKey(2, "task", "api.test", 443, "cred"));
  EXPECT_NE(base, poolKey(1, "other", "api.test", 443, "cred"));
  EXPECT_NE(base, poolKey(1, "task", "other.test", 443, "cred"));
  EXPECT_NE(base, poolKey(1, "task", "api.test", 8443, "cred"));
  EXPECT_NE(base, poolKey(1, "task", "api.test", 443, "other"));
  EXPECT_NE(base, poolKey(1, "task", "api.test", 443));
  // A separator inside a part cannot make two different keys equal.
  EXPECT_NE(poolKey(1, "a\nb", "c", 1), poolKey(1, "a", "b\nc", 1));
}

TEST(SocketIsQuiet, OpenEmptySocketOnly) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  EXPECT_TRUE(socketIsQuiet(sv[0]));
  ASSERT_EQ(::write(sv[1], "x", 1), 1);
  EXPECT_FALSE(socketIsQuiet(sv[0]));  // a byte nobody asked for
  char c;
  ASSERT_EQ(::read(sv[0], &c, 1), 1);
  EXPECT_TRUE(socketIsQuiet(sv[0]));  // the peek consumed nothing: now it is empty again
  ::close(sv[1]);
  EXPECT_FALSE(socketIsQuiet(sv[0]));  // the peer closed
  ::close(sv[0]);
  EXPECT_FALSE(socketIsQuiet(sv[0]));  // not a descriptor any more
  EXPECT_FALSE(socketIsQuiet(-1));
}

TEST(IdlePool, TakesNewestFirstPerKey) {
  IdlePool<FakeConn> pool;
  pool.put("k", FakeConn{1}, "10.0.0.1:443");
  pool.put("k", FakeConn{2}, "10.0.0.2:443");
  pool.put("other", FakeConn{3}, "10.0.0.3:443");
  EXPECT_EQ(pool.size(), 3u);
  auto a = pool.take("k");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->conn.id, 2);
  EXPECT_EQ(a->upstream, "10.0.0.2:443");
  auto b = pool.take("k");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->conn.id, 1);
  EXPECT_FALSE(pool.take("k"));
  EXPECT_FALSE(pool.take("missing"));
  EXPECT_EQ(pool.size(), 1u);
}

TEST(IdlePool, NeverHandsOutOrKeepsAConnectionThatIsNotQuiet) {
  IdlePool<FakeConn> pool;
  pool.put("k", FakeConn{1, std::make_shared<bool>(false)}, "a");
  EXPECT_EQ(pool.size(), 0u);  // refused on the way in
  FakeConn older{2}, newer{3};
  auto newerQuiet = newer.quiet;
  pool.put("k", older, "a");
  pool.put("k", newer, "a");
  EXPECT_EQ(pool.size(), 2u);
  *newerQuiet = false;  // the upstream closed it (or sent something) while it was idle
  auto got = pool.take("k");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->conn.id, 2);  // the broken newer one was dropped on the way
  EXPECT_EQ(pool.size(), 0u);
}

TEST(IdlePool, ExpiredConnectionsAreDropped) {
  IdlePool<FakeConn> pool(std::chrono::seconds(0));
  pool.put("k", FakeConn{1}, "a");
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(pool.take("k"));
  EXPECT_EQ(pool.size(), 0u);
}

TEST(IdlePool, DropStaleClosesBrokenAndExpiredEntriesOnly) {
  IdlePool<FakeConn> pool;
  FakeConn a{1}, b{2}, c{3};
  auto bQuiet = b.quiet;
  pool.put("k", a, "x");
  pool.put("k", b, "x");
  pool.put("j", c, "x");
  *bQuiet = false;  // the upstream closed it while it sat in the pool
  pool.dropStale();
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool.take("k")->conn.id, 1);
  EXPECT_EQ(pool.take("j")->conn.id, 3);

  IdlePool<FakeConn> expiring(std::chrono::seconds(0));
  expiring.put("k", FakeConn{4}, "x");
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  expiring.dropStale();
  EXPECT_EQ(expiring.size(), 0u);
}

TEST(IdlePool, BoundedPerKeyAndInTotal) {
  IdlePool<FakeConn> pool(std::chrono::seconds(30), 2, 3);
  for (int i = 0; i < 5; ++i) pool.put("k", FakeConn{i}, "a");
  EXPECT_EQ(pool.size(), 2u);  // per key
  pool.put("j", FakeConn{10}, "a");
  pool.put("l", FakeConn{11}, "a");  // over the total: closed
  EXPECT_EQ(pool.size(), 3u);
  EXPECT_FALSE(pool.take("l"));
  pool.clear();
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_FALSE(pool.take("k"));
}

}  // namespace
}  // namespace sandgate::proxy
