// Idle upstream connections of one worker, kept for reuse per key: plain TCP connections of
// forwarded requests per (snapshot, task, host, port), verified TLS connections of intercepted
// requests per (snapshot, task, credential, host, port). A connection that has unread bytes or
// was closed by the peer is never handed out again. Only touched from the worker's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace sandgate::proxy {

// The pool key. The generation is part of it: a reload may change where a name resolves to or
// which addresses are allowed, so connections vetted under an old snapshot are not reused.
// `credential`: the TLS context a connection was verified with (empty for plain TCP).
std::string poolKey(uint64_t generation, std::string_view task, std::string_view host,
                    uint16_t port, std::string_view credential = {});

// True when `fd` is still open and has nothing unread (peeked without blocking): 0 bytes means
// the peer closed, bytes nobody asked for mean a broken or hostile upstream.
bool socketIsQuiet(int fd);

// Specialised for each pooled connection type: `static bool quiet(Conn&)` says whether an idle
// connection may be reused (open, nothing unread).
template <class Conn>
struct PooledConnection;

// `Conn` is movable and has a PooledConnection specialisation.
template <class Conn>
class IdlePool {
 public:
  struct Idle {
    Conn conn;
    std::string upstream;  // "address:port" as dialled, for the audit log
  };

  explicit IdlePool(std::chrono::seconds maxIdle = std::chrono::seconds(30), size_t maxPerKey = 8,
                    size_t maxTotal = 256)
      : maxIdle_(maxIdle), maxPerKey_(maxPerKey), maxTotal_(maxTotal) {}

  // The newest live idle connection for `key`, if one is left; stale ones are closed on the way.
  std::optional<Idle> take(const std::string& key) {
    auto it = idle_.find(key);
    if (it == idle_.end()) return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    auto& q = it->second;
    std::optional<Idle> out;
    while (!q.empty() && !out) {
      Entry e = std::move(q.back());
      q.pop_back();
      --total_;
      if (now - e.since <= maxIdle_ && PooledConnection<Conn>::quiet(e.conn.conn))
        out.emplace(std::move(e.conn));
      // else: the entry's connection closes as it goes out of scope.
    }
    if (q.empty()) idle_.erase(it);
    return out;
  }

  // Keeps `conn` unless it is not quiet or the pool is full (then it is closed).
  void put(const std::string& key, Conn conn, std::string upstream) {
    if (!PooledConnection<Conn>::quiet(conn)) return;
    if (total_ >= maxTotal_) sweep();
    auto& q = idle_[key];
    if (q.size() >= maxPerKey_ || total_ >= maxTotal_) {
      if (q.empty()) idle_.erase(key);
      return;
    }
    q.push_back({Idle{std::move(conn), std::move(upstream)}, std::chrono::steady_clock::now()});
    ++total_;
  }

  // Closes every entry that has expired or is no longer quiet (the upstream closed it or sent
  // something): the server calls this every second, so that a closed connection does not sit
  // in the pool until its key is asked for again.
  void dropStale() {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = idle_.begin(); it != idle_.end();) {
      auto& q = it->second;
      for (auto e = q.begin(); e != q.end();) {
        if (now - e->since > maxIdle_ || !PooledConnection<Conn>::quiet(e->conn.conn)) {
          e = q.erase(e);
          --total_;
        } else {
          ++e;
        }
      }
      it = q.empty() ? idle_.erase(it) : std::next(it);
    }
  }

  void clear() {
    idle_.clear();
    total_ = 0;
  }
  size_t size() const { return total_; }

 private:
  struct Entry {
    Idle conn;
    std::chrono::steady_clock::time_point since;
  };

  // Drops the expired entries of every key (only when the pool is full).
  void sweep() {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = idle_.begin(); it != idle_.end();) {
      auto& q = it->second;
      while (!q.empty() && now - q.front().since > maxIdle_) {
        q.pop_front();
        --total_;
      }
      it = q.empty() ? idle_.erase(it) : std::next(it);
    }
  }

  std::chrono::seconds maxIdle_;
  size_t maxPerKey_;
  size_t maxTotal_;
  size_t total_ = 0;
  std::unordered_map<std::string, std::deque<Entry>> idle_;
};

}  // namespace sandgate::proxy
