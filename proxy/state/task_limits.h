// Per-task admission state shared by every worker thread: concurrent connections and
// tunnels, and a new-connection rate. Lock-free (atomics), so a task at its limit never
// holds up another task or another thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "budget/local_counter.h"
#include "config/config.h"

namespace sandgate::proxy {

class TaskState {
 public:
  // Takes one of `max` slots; false when all are taken.
  bool tryAcquireConnection(uint32_t max) { return tryAcquire(connections_, max); }
  void releaseConnection() { connections_.fetch_sub(1, std::memory_order_relaxed); }
  bool tryAcquireTunnel(uint32_t max) { return tryAcquire(tunnels_, max); }
  void releaseTunnel() { tunnels_.fetch_sub(1, std::memory_order_relaxed); }

  // Token bucket (as GCRA) of `ratePerSecond` with a burst of max(1, rate) new connections.
  bool tryTakeConnectionToken(double ratePerSecond, std::chrono::steady_clock::time_point now);

  uint32_t connections() const { return connections_.load(std::memory_order_relaxed); }
  uint32_t tunnels() const { return tunnels_.load(std::memory_order_relaxed); }

 private:
  static bool tryAcquire(std::atomic<uint32_t>& counter, uint32_t max);
  std::atomic<uint32_t> connections_{0};
  std::atomic<uint32_t> tunnels_{0};
  std::atomic<int64_t> theoreticalArrivalNs_{0};
};

class TaskMetrics;

// Releases a slot taken from a TaskState when it goes out of scope. A tunnel slot given the
// task's metrics counts in sandgate_tunnels_active for as long as it is held.
class TaskSlot {
 public:
  enum class Kind { kConnection, kTunnel };
  TaskSlot() = default;
  TaskSlot(std::shared_ptr<TaskState> s, Kind k) : state_(std::move(s)), kind_(k) {}
  TaskSlot(std::shared_ptr<TaskState> s, Kind k, std::shared_ptr<TaskMetrics> m);
  TaskSlot(TaskSlot&& o) noexcept
      : state_(std::move(o.state_)), kind_(o.kind_), metrics_(std::move(o.metrics_)) {}
  TaskSlot& operator=(TaskSlot&& o) noexcept {
    reset();
    state_ = std::move(o.state_);
    kind_ = o.kind_;
    metrics_ = std::move(o.metrics_);
    return *this;
  }
  ~TaskSlot() { reset(); }
  void reset();
  explicit operator bool() const { return state_ != nullptr; }

 private:
  std::shared_ptr<TaskState> state_;
  Kind kind_ = Kind::kConnection;
  std::shared_ptr<TaskMetrics> metrics_;
};

// The states of ad-hoc tasks (a task token's `sub` that the config does not name, see
// token_task.h), by name. A task's state is kept while a connection holds it and until the
// latest `exp` of its tokens, so that its counts and rate hold across its connections, and
// then dropped: the number kept follows the tokens in use, not every name ever minted.
class AdhocTaskStates {
 public:
  // Taken once per connection that an ad-hoc token identifies (never per request).
  std::shared_ptr<TaskState> get(const std::string& task, int64_t until, int64_t now);
  // Name -> state of every task kept now (GET /v1/tasks), sorted by name.
  std::vector<std::pair<std::string, std::shared_ptr<TaskState>>> list() const;
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<TaskState> state;
    int64_t until = 0;
  };
  void sweep(int64_t now);  // with mu_ held
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> tasks_;
  size_t sweepAt_ = 64;  // the next size at which get() sweeps: amortised O(1) per call
};

// Task name -> state, kept across config reloads so that a reload does not reset counts.
class TaskRegistry {
 public:
  std::shared_ptr<TaskState> get(const std::string& task);
  // Ad-hoc tasks' states, shared by every snapshot of this registry (they survive reloads).
  const std::shared_ptr<AdhocTaskStates>& adhoc() const { return adhoc_; }
  // Budget counters (in-process), shared by every snapshot of this registry: a reload does not
  // give a task its budget back.
  const std::shared_ptr<budget::Counter>& budgetCounter() const { return budgetCounter_; }
  // The shared counters of `state.redis` (state/redis/redis_counter.h), kept across reloads
  // while the Redis settings and password stay the same (a reload then neither drops the
  // connection nor what is batched); made again when they change. Null `redis`: none.
  std::shared_ptr<budget::Counter> sharedCounter(
      const config::RedisState* redis, std::string_view password,
      const std::function<std::shared_ptr<budget::Counter>()>& make);

 private:
  std::mutex mu_;  // taken on reload only, never per request
  std::unordered_map<std::string, std::shared_ptr<TaskState>> tasks_;
  std::shared_ptr<AdhocTaskStates> adhoc_ = std::make_shared<AdhocTaskStates>();
  std::shared_ptr<budget::Counter> budgetCounter_ = std::make_shared<budget::LocalCounter>();
  std::string sharedKey_;  // the settings (and a hash of the password) sharedCounter_ is for
  std::shared_ptr<budget::Counter> sharedCounter_;
};

}  // namespace sandgate::proxy
