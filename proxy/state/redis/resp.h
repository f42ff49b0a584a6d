// RESP (the Redis protocol) for the shared budget counters: commands encoded and replies
// decoded with hiredis's formatter and reader only. hiredis's own I/O is not used (Debian's
// 0.14 is blocking and has no TLS): the bytes go over sandgate's own Asio socket or TLS
// stream (redis_link.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sandgate::proxy::redis {

// One decoded reply. Errors (`-ERR ...`) are replies, not failures: the caller decides.
struct Reply {
  enum class Type { kString, kStatus, kError, kInteger, kNil, kArray };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus, kError
  int64_t integer = 0;
  std::vector<Reply> elements;  // kArray

  bool isError() const { return type == Type::kError; }
  // "NOSCRIPT", "WRONGPASS", ...: the first word of an error (empty for other replies).
  std::string_view errorCode() const;
};

// The RESP encoding of a command (each argument a bulk string, so binary-safe).
std::string formatCommand(const std::vector<std::string_view>& argv);

// Decodes replies from bytes fed as they arrive. A protocol error (bytes that are not RESP)
// poisons the reader: the connection must be dropped.
class ReplyReader {
 public:
  ReplyReader();
  ~ReplyReader();
  ReplyReader(const ReplyReader&) = delete;
  ReplyReader& operator=(const ReplyReader&) = delete;

  // False on a protocol error (then the connection must be dropped).
  bool feed(std::string_view bytes);
  // The next complete reply; nullopt while it is incomplete. Sets `failed` on a protocol error.
  std::optional<Reply> next(bool& failed);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sandgate::proxy::redis
