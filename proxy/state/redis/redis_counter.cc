// Budget counters in Redis (see redis_counter.h).
#include "proxy/state/redis/redis_counter.h"

#include <fmt/format.h>
#include <openssl/sha.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/unix_time.h"

namespace sandgate::proxy::redis {

namespace {

// Adds ARGV[1] to KEYS[1] unless the sum would pass ARGV[2]; the key expires at ARGV[3].
// Returns {1, value after} or {0, value found}. One script, so two replicas cannot both see
// room for the last unit.
constexpr std::string_view kTake = R"(local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local a = tonumber(ARGV[1])
if v + a > tonumber(ARGV[2]) then return {0, v} end
v = redis.call('INCRBY', KEYS[1], a)
redis.call('EXPIREAT', KEYS[1], ARGV[3])
return {1, v})";

// Adds ARGV[1] (negative: gives back) to KEYS[1], never below 0; expires at ARGV[2].
constexpr std::string_view kAdd = R"(local v = redis.call('INCRBY', KEYS[1], ARGV[1])
if v < 0 then redis.call('SET', KEYS[1], 0) v = 0 end
redis.call('EXPIREAT', KEYS[1], ARGV[2])
return v)";

// A task's new-connection rate shared by every replica: the local limiter's GCRA
// (state/task_limits.h) on a key holding the theoretical arrival time, in microseconds of
// Redis's own clock (TIME), so that replicas whose clocks differ still share one schedule.
// ARGV: the interval between connections and the tolerance (a burst's worth), microseconds.
// Returns 1 (admitted) or 0; the key expires once the schedule has caught up with now.
constexpr std::string_view kRate = R"(local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
if tat - now > tonumber(ARGV[2]) then return 0 end
tat = tat + tonumber(ARGV[1])
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
return 1)";

// Run windows never end: their keys live this long after the last write (a run is hours).
constexpr int64_t kRunKeyLife = 30 * 24 * 3600;

// Which thread's answers were guesses (Counter::failedOpen()).
thread_local uint64_t tlFailedOpen = 0;

}  // namespace

std::string_view takeScript() { return kTake; }
std::string_view addScript() { return kAdd; }
std::string_view rateScript() { return kRate; }

std::string scriptSha(std::string_view script) {
  unsigned char md[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(script.data()), script.size(), md);
  std::string out;
  for (unsigned char b : md) out += fmt::format("{:02x}", b);
  return out;
}

RedisCounter::RedisCounter(std::shared_ptr<Link> link, const config::RedisState& cfg,
                           std::chrono::milliseconds flushEvery)
    : link_(std::move(link)),
      prefix_(cfg.keyPrefix),
      failOpen_(cfg.fail == config::RedisState::Fail::kOpen),
      flushEvery_(flushEvery) {
  flusher_ = std::thread([this] {
    std::unique_lock lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, flushEvery_, [&] { return stop_; });
      if (stop_) break;
      lk.unlock();
      flush();
      lk.lock();
    }
  });
}

RedisCounter::~RedisCounter() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  flusher_.join();
  flush();
}

int64_t RedisCounter::expiryFor(int64_t expiresAt) const {
  return expiresAt > 0 ? expiresAt : unixNow() + kRunKeyLife;
}

void RedisCounter::openAnswer() {
  ++tlFailedOpen;
  failOpenTotal_.fetch_add(1, std::memory_order_relaxed);
}

uint64_t RedisCounter::failedOpen() const { return tlFailedOpen; }

std::optional<Reply> RedisCounter::script(int which, const std::string& key,
                                          const std::vector<std::string>& args) {
  static const std::string shas[3] = {scriptSha(kTake), scriptSha(kAdd), scriptSha(kRate)};
  static constexpr std::string_view bodies[3] = {kTake, kAdd, kRate};
  const std::string_view body = bodies[which];
  std::vector<std::string_view> argv = {"EVALSHA", shas[which], "1", key};
  for (const auto& a : args) argv.push_back(a);
  auto r = link_->call({formatCommand(argv)});
  if (!r || r->size() != 1) return std::nullopt;
  if ((*r)[0].errorCode() == "NOSCRIPT") {
    // Redis restarted (or flushed its scripts): load it and run it, in one round trip.
    auto again = link_->call({formatCommand({"SCRIPT", "LOAD", body}), formatCommand(argv)});
    if (!again || again->size() != 2) return std::nullopt;
    return std::move((*again)[1]);
  }
  return std::move((*r)[0]);
}

budget::TakeResult RedisCounter::tryAdd(std::string_view key, int64_t amount, int64_t limit,
                                        int64_t expiresAt) {
  using Status = budget::TakeResult::Status;
  auto r =
      script(0, prefix_ + std::string(key),
             {std::to_string(amount), std::to_string(limit), std::to_string(expiryFor(expiresAt))});
  if (r && r->type == Reply::Type::kArray && r->elements.size() == 2 &&
      r->elements[0].type == Reply::Type::kInteger &&
      r->elements[1].type == Reply::Type::kInteger) {
    return {r->elements[0].integer == 1 ? Status::kTaken : Status::kOver, r->elements[1].integer};
  }
  if (r && r->isError()) spdlog::warn("state.redis: budget script refused: {}", r->errorCode());
  if (failOpen_) {
    openAnswer();
    return {Status::kTaken, 0};
  }
  return {Status::kUnavailable, 0};
}

budget::TakeResult RedisCounter::takeRate(std::string_view task, double perSecond) {
  using Status = budget::TakeResult::Status;
  if (perSecond <= 0) return {Status::kOver, 0};
  // As TaskState::tryTakeConnectionToken: a burst of max(1, rate).
  const double interval = 1e6 / perSecond;
  const double tolerance = (std::max(1.0, perSecond) - 1.0) * interval;
  auto r = script(2, fmt::format("{}sandgate:rate:{}:connections", prefix_, task),
                  {fmt::format("{:.0f}", interval), fmt::format("{:.0f}", tolerance)});
  if (r && r->type == Reply::Type::kInteger) {
    return {r->integer == 1 ? Status::kTaken : Status::kOver, 0};
  }
  if (r && r->isError()) spdlog::warn("state.redis: rate script refused: {}", r->errorCode());
  if (failOpen_) {
    openAnswer();
    return {Status::kTaken, 0};
  }
  return {Status::kUnavailable, 0};
}

bool RedisCounter::add(std::string_view key, int64_t amount, int64_t expiresAt) {
  std::lock_guard lk(mu_);
  auto it = pending_.find(std::string(key));
  if (it == pending_.end()) {
    // Bounded: with Redis gone for long, sums stop growing in memory (and are lost: the
    // budget undercounts, which closed mode refuses to rely on anyway).
    if (pending_.size() >= kMaxPending) return false;
    it = pending_.emplace(std::string(key), Pending{}).first;
  }
  it->second.amount += amount;
  it->second.expiresAt = std::max(it->second.expiresAt, expiresAt);
  return true;
}

std::optional<int64_t> RedisCounter::get(std::string_view key) {
  int64_t local = 0;
  {
    std::lock_guard lk(mu_);
    if (auto it = pending_.find(std::string(key)); it != pending_.end()) {
      local = it->second.amount;
    }
  }
  auto r = link_->call({formatCommand({"GET", prefix_ + std::string(key)})});
  if (r && r->size() == 1) {
    const Reply& v = (*r)[0];
    if (v.type == Reply::Type::kNil) return std::max<int64_t>(0, local);
    if (v.type == Reply::Type::kString) {
      try {
        return std::max<int64_t>(0, std::stoll(v.str) + local);
      } catch (const std::exception&) {
      }
    }
  }
  if (failOpen_) {
    openAnswer();
    return 0;
  }
  return std::nullopt;
}

bool RedisCounter::flush() {
  std::unordered_map<std::string, Pending> batch;
  {
    std::lock_guard lk(mu_);
    batch.swap(pending_);
  }
  if (batch.empty()) return true;
  static const std::string sha = scriptSha(kAdd);
  std::vector<std::string> cmds;
  for (const auto& [key, p] : batch) {
    if (p.amount == 0) continue;
    const std::string full = prefix_ + key;
    cmds.push_back(formatCommand({"SCRIPT", "LOAD", kAdd}));
    cmds.push_back(formatCommand({"EVALSHA", sha, "1", full, std::to_string(p.amount),
                                  std::to_string(expiryFor(p.expiresAt))}));
  }
  // SCRIPT LOAD before each EVALSHA in the pipeline: a batch is one round trip whether or not
  // Redis lost its scripts, and loading a loaded script is cheap.
  auto r = cmds.empty() ? std::optional<std::vector<Reply>>(std::vector<Reply>{})
                        : link_->call(std::move(cmds));
  bool ok = r.has_value();
  if (ok) {
    for (size_t i = 1; i < r->size(); i += 2) ok &= !(*r)[i].isError();
  }
  if (!ok) {
    // Kept for the next flush (bounded by kMaxPending).
    std::lock_guard lk(mu_);
    for (auto& [key, p] : batch) {
      auto it = pending_.find(key);
      if (it != pending_.end()) {
        it->second.amount += p.amount;
      } else if (pending_.size() < kMaxPending) {
        pending_.emplace(key, p);
      }
    }
  }
  return ok;
}

}  // namespace sandgate::proxy::redis
