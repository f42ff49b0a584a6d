// Per-task admission counters and rate limiting (see task_limits.h).
#include "proxy/state/task_limits.h"

#include <fmt/format.h>
#include <openssl/sha.h>

#include <algorithm>

#include "proxy/observe/metrics.h"

namespace sandgate::proxy {

bool TaskState::tryAcquire(std::atomic<uint32_t>& counter, uint32_t max) {
  uint32_t cur = counter.load(std::memory_order_relaxed);
  while (cur < max) {
    if (counter.compare_exchange_weak(cur, cur + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

bool TaskState::tryTakeConnectionToken(double ratePerSecond,
                                       std::chrono::steady_clock::time_point now) {
  if (ratePerSecond <= 0) return false;
  const auto interval = static_cast<int64_t>(1e9 / ratePerSecond);
  const auto tolerance =
      static_cast<int64_t>((std::max(1.0, ratePerSecond) - 1.0) * 1e9 / ratePerSecond);
  const int64_t nowNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  int64_t tat = theoreticalArrivalNs_.load(std::memory_order_relaxed);
  while (true) {
    int64_t base = std::max(tat, nowNs);
    if (base - nowNs > tolerance) return false;
    if (theoreticalArrivalNs_.compare_exchange_weak(tat, base + interval,
                                                    std::memory_order_relaxed)) {
      return true;
    }
  }
}

TaskSlot::TaskSlot(std::shared_ptr<TaskState> s, Kind k, std::shared_ptr<TaskMetrics> m)
    : state_(std::move(s)), kind_(k), metrics_(std::move(m)) {
  if (metrics_ && kind_ == Kind::kTunnel) metrics_->tunnelOpened();
}

void TaskSlot::reset() {
  if (!state_) return;
  if (kind_ == Kind::kConnection) {
    state_->releaseConnection();
  } else {
    state_->releaseTunnel();
    if (metrics_) metrics_->tunnelClosed();
  }
  state_.reset();
  metrics_.reset();
}

std::shared_ptr<TaskState> TaskRegistry::get(const std::string& task) {
  std::lock_guard lock(mu_);
  auto& s = tasks_[task];
  if (!s) s = std::make_shared<TaskState>();
  return s;
}

std::shared_ptr<TaskState> AdhocTaskStates::get(const std::string& task, int64_t until,
                                                int64_t now) {
  std::lock_guard lock(mu_);
  auto& e = tasks_[task];
  if (!e.state) e.state = std::make_shared<TaskState>();
  e.until = std::max(e.until, until);
  auto state = e.state;
  if (tasks_.size() >= sweepAt_) {
    sweep(now);
    sweepAt_ = std::max<size_t>(64, 2 * tasks_.size());
  }
  return state;
}

void AdhocTaskStates::sweep(int64_t now) {
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    // use_count 1: only this map holds it, so no connection counts against it.
    if (it->second.until < now && it->second.state.use_count() == 1) {
      it = tasks_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<std::pair<std::string, std::shared_ptr<TaskState>>> AdhocTaskStates::list() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, std::shared_ptr<TaskState>>> out;
  for (const auto& [name, e] : tasks_) out.emplace_back(name, e.state);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

size_t AdhocTaskStates::size() const {
  std::lock_guard lock(mu_);
  return tasks_.size();
}

}  // namespace sandgate::proxy

namespace sandgate::proxy {

std::shared_ptr<budget::Counter> TaskRegistry::sharedCounter(
    const config::RedisState* redis, std::string_view password,
    const std::function<std::shared_ptr<budget::Counter>()>& make) {
  std::lock_guard lk(mu_);
  if (!redis) {
    sharedKey_.clear();
    sharedCounter_.reset();
    return nullptr;
  }
  // A digest of the password, not the password: this key outlives the snapshot.
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(password.data()), password.size(), md);
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}|", redis->tls, redis->host, redis->port,
                                redis->db, static_cast<int>(redis->fail), redis->keyPrefix);
  for (unsigned char b : md) key += fmt::format("{:02x}", b);
  if (!sharedCounter_ || key != sharedKey_) {
    sharedCounter_.reset();  // the old link's thread ends (flushing) before the new one starts
    sharedCounter_ = make();
    sharedKey_ = std::move(key);
  }
  return sharedCounter_;
}

}  // namespace sandgate::proxy
