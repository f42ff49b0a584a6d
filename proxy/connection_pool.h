// Idle upstream connections of one worker, kept for reuse per (snapshot, task, host, port).
// A connection that has unread bytes or was closed by the peer is never handed out again.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>

namespace sandgate::proxy {

class ConnectionPool {
 public:
  struct Idle {
    boost::asio::ip::tcp::socket socket;
    std::string upstream;  // "address:port" as dialled, for the audit log
  };

  explicit ConnectionPool(std::chrono::seconds maxIdle = std::chrono::seconds(30),
                          size_t maxPerKey = 8, size_t maxTotal = 256)
      : maxIdle_(maxIdle), maxPerKey_(maxPerKey), maxTotal_(maxTotal) {}

  static std::string key(uint64_t generation, std::string_view task, std::string_view host,
                         uint16_t port);

  // A live idle connection for `key`, if one is left; stale ones are closed on the way.
  std::optional<Idle> take(const std::string& key);
  void put(const std::string& key, boost::asio::ip::tcp::socket socket, std::string upstream);
  void clear();
  size_t size() const { return total_; }

 private:
  struct Entry {
    Idle conn;
    std::chrono::steady_clock::time_point since;
  };
  // True when the socket is still open and has nothing unread (peeked without blocking).
  static bool reusable(boost::asio::ip::tcp::socket& s);
  void sweep();  // drops expired entries of every key (only when the pool is full)

  std::chrono::seconds maxIdle_;
  size_t maxPerKey_;
  size_t maxTotal_;
  size_t total_ = 0;
  std::unordered_map<std::string, std::deque<Entry>> idle_;
};

}  // namespace sandgate::proxy
