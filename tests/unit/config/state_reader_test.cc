// Tests of `state.redis` (issue #41, shared budget counters): what loads, and each mistake with
// its position and message. A password in the URL is refused: the config is not a secret store.
#include <gtest/gtest.h>

#include "config/config.h"
#include "tests/unit/config/test_util.h"

namespace sandgate::config {
namespace {

using testing::Expected;
using testing::expectOne;
using testing::loadErrors;
using testing::loadOk;

TEST(StateRedis, LoadsWithDefaults) {
  auto c = loadOk(
      "credentials:\n"
      "  redis-auth:\n"
      "    source: {file: /run/secrets/redis}\n"
      "state:\n"
      "  redis:\n"
      "    url: \"rediss://Redis.Internal:6380/3\"\n"
      "    password: redis-auth\n"
      "    fail: open\n"
      "    key_prefix: \"team-a:\"\n");
  ASSERT_TRUE(c.state.redis);
  const auto& r = *c.state.redis;
  EXPECT_TRUE(r.tls);
  EXPECT_EQ(r.host, "redis.internal");
  EXPECT_EQ(r.port, 6380);
  EXPECT_EQ(r.db, 3);
  ASSERT_TRUE(r.password);
  EXPECT_EQ(r.password->value, "redis-auth");
  EXPECT_EQ(r.fail, RedisState::Fail::kOpen);
  EXPECT_EQ(r.keyPrefix, "team-a:");
  // A credential only Redis uses needs no hosts or inject.
  EXPECT_TRUE(c.credentials.at("redis-auth").hosts.empty());

  auto d = loadOk("state:\n  redis: {url: \"redis://127.0.0.1\"}\n");
  ASSERT_TRUE(d.state.redis);
  EXPECT_FALSE(d.state.redis->tls);
  EXPECT_EQ(d.state.redis->port, 6379);
  EXPECT_EQ(d.state.redis->db, 0);
  EXPECT_EQ(d.state.redis->fail, RedisState::Fail::kClosed);  // closed unless said
  EXPECT_FALSE(d.state.redis->password);
  EXPECT_FALSE(loadOk("listen: {proxy: \"127.0.0.1:0\"}\n").state.redis);
}

TEST(StateRedis, Mistakes) {
  struct Case {
    const char* name;
    const char* yaml;
    Expected want;
  };
  const Case cases[] = {
      {"password in the url",
       "state:\n  redis:\n    url: \"redis://:hunter2-secret@h:1/0\"\n",
       {3, 10, "state.redis.url", "name a credential in `password:`"}},
      {"user in the url",
       "state:\n  redis:\n    url: \"redis://default@h:1\"\n",
       {3, 10, "state.redis.url", "carries a user or password"}},
      {"unknown scheme",
       "state:\n  redis:\n    url: \"http://h:1\"\n",
       {3, 10, "state.redis.url", "unsupported scheme `http`"}},
      {"bad database",
       "state:\n  redis:\n    url: \"redis://h:1/x\"\n",
       {3, 10, "state.redis.url", "database number"}},
      {"a query",
       "state:\n  redis:\n    url: \"redis://h:1/0?password=x\"\n",
       {3, 10, "state.redis.url", "no query"}},
      {"no url",
       "state:\n  redis: {fail: open}\n",
       {2, 3, "state.redis", "missing required key `url`"}},
      {"bad fail",
       "state:\n  redis:\n    url: \"redis://h\"\n    fail: maybe\n",
       {4, 11, "state.redis.fail", "expected closed or open"}},
      {"unknown credential",
       "state:\n  redis:\n    url: \"redis://h\"\n    password: nope\n",
       {4, 15, "state.redis.password", "unknown credential `nope`"}},
      {"prefix with a space",
       "state:\n  redis:\n    url: \"redis://h\"\n    key_prefix: \"a b\"\n",
       {4, 17, "state.redis.key_prefix", "printable"}},
      {"unknown key",
       "state:\n  redis:\n    url: \"redis://h\"\n    pasword: x\n",
       {4, 5, "state.redis.pasword", "unknown key"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expectOne(loadErrors(c.yaml), c.want);
  }
}

}  // namespace
}  // namespace sandgate::config
