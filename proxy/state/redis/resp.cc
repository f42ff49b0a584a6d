// RESP encoding and decoding through hiredis (see resp.h).
#include "proxy/state/redis/resp.h"

#include <hiredis/hiredis.h>

#include <cstdlib>

namespace sandgate::proxy::redis {

namespace {

Reply convert(const redisReply* r) {
  Reply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = Reply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::kArray;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default:
      out.type = Reply::Type::kNil;
  }
  return out;
}

}  // namespace

std::string_view Reply::errorCode() const {
  if (type != Type::kError) return {};
  std::string_view s = str;
  return s.substr(0, s.find(' '));
}

std::string formatCommand(const std::vector<std::string_view>& argv) {
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (auto a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  char* cmd = nullptr;
  int n = redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), ptrs.data(), lens.data());
  std::string out;
  if (n > 0 && cmd) out.assign(cmd, static_cast<size_t>(n));
  std::free(cmd);
  return out;
}

struct ReplyReader::Impl {
  redisReader* reader = nullptr;
  bool failed = false;
};

ReplyReader::ReplyReader() : impl_(std::make_unique<Impl>()) {
  impl_->reader = redisReaderCreate();
  // Replies here are small (numbers, short arrays); a server sending megabytes is not one we
  // talk to. hiredis keeps its buffer bounded by this when idle.
  if (impl_->reader) impl_->reader->maxbuf = 64 * 1024;
}

ReplyReader::~ReplyReader() {
  if (impl_->reader) redisReaderFree(impl_->reader);
}

bool ReplyReader::feed(std::string_view bytes) {
  if (!impl_->reader || impl_->failed) return false;
  if (redisReaderFeed(impl_->reader, bytes.data(), bytes.size()) != REDIS_OK) {
    impl_->failed = true;
  }
  return !impl_->failed;
}

std::optional<Reply> ReplyReader::next(bool& failed) {
  failed = impl_->failed || !impl_->reader;
  if (failed) return std::nullopt;
  void* raw = nullptr;
  if (redisReaderGetReply(impl_->reader, &raw) != REDIS_OK) {
    impl_->failed = failed = true;
    return std::nullopt;
  }
  if (!raw) return std::nullopt;
  auto* r = static_cast<redisReply*>(raw);
  Reply out = convert(r);
  freeReplyObject(r);
  return out;
}

}  // namespace sandgate::proxy::redis
