// The RESP glue of the shared budget counters (proxy/state/redis/resp.h): commands encoded by
// hiredis's formatter, replies decoded by its reader however the bytes are split, and a server
// that sends something that is not RESP poisons the reader (the link then drops it).
#include <gtest/gtest.h>

#include "proxy/state/redis/redis_counter.h"
#include "proxy/state/redis/resp.h"

namespace sandgate::proxy::redis {
namespace {

TEST(RedisResp, CommandsAreBulkStringsSoKeysCannotInjectCommands) {
  EXPECT_EQ(formatCommand({"GET", "k"}), "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
  // A key holding CRLF and a second command stays one argument (lengths, not delimiters).
  std::string key = "a\r\nFLUSHALL\r\n";
  EXPECT_EQ(formatCommand({"GET", key}), "*2\r\n$3\r\nGET\r\n$13\r\n" + key + "\r\n");
  std::string nul("x\0y", 3);
  static constexpr char kWant[] = "*3\r\n$3\r\nSET\r\n$3\r\nx\0y\r\n$0\r\n\r\n";
  EXPECT_EQ(formatCommand({"SET", nul, ""}), std::string(kWant, sizeof kWant - 1));
}

TEST(RedisResp, RepliesDecodeWhateverTheSplit) {
  const std::string wire =
      "+OK\r\n:42\r\n$5\r\nhello\r\n$-1\r\n*2\r\n:1\r\n:-7\r\n-NOSCRIPT No matching script\r\n";
  for (size_t step : {1u, 2u, 3u, 7u, 100u}) {
    ReplyReader reader;
    std::vector<Reply> got;
    bool failed = false;
    for (size_t at = 0; at < wire.size(); at += step) {
      ASSERT_TRUE(reader.feed(std::string_view(wire).substr(at, step)));
      while (auto r = reader.next(failed)) got.push_back(std::move(*r));
      ASSERT_FALSE(failed);
    }
    ASSERT_EQ(got.size(), 6u) << step;
    EXPECT_EQ(got[0].type, Reply::Type::kStatus);
    EXPECT_EQ(got[0].str, "OK");
    EXPECT_EQ(got[1].integer, 42);
    EXPECT_EQ(got[2].type, Reply::Type::kString);
    EXPECT_EQ(got[2].str, "hello");
    EXPECT_EQ(got[3].type, Reply::Type::kNil);
    ASSERT_EQ(got[4].elements.size(), 2u);
    EXPECT_EQ(got[4].elements[1].integer, -7);
    EXPECT_TRUE(got[5].isError());
    EXPECT_EQ(got[5].errorCode(), "NOSCRIPT");
    EXPECT_EQ(got[2].errorCode(), "");
  }
}

TEST(RedisResp, BytesThatAreNotRespPoisonTheReader) {
  ReplyReader reader;
  bool failed = false;
  reader.feed("HTTP/1.1 200 OK\r\n");
  EXPECT_FALSE(reader.next(failed));
  EXPECT_TRUE(failed);
  // Poisoned for good: later valid bytes are not read as replies to later commands.
  EXPECT_FALSE(reader.feed(":1\r\n"));
  EXPECT_FALSE(reader.next(failed));
  EXPECT_TRUE(failed);
}

TEST(RedisResp, ScriptShasAreRedisOwn) {
  // Redis's documented SHA-1 for SCRIPT LOAD "return 1".
  EXPECT_EQ(scriptSha("return 1"), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
  EXPECT_NE(scriptSha(takeScript()), scriptSha(addScript()));
}

}  // namespace
}  // namespace sandgate::proxy::redis
