// Per-worker upstream keep-alive pool (see connection_pool.h).
#include "proxy/connection_pool.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <cerrno>

namespace sandgate::proxy {

std::string ConnectionPool::key(uint64_t generation, std::string_view task, std::string_view host,
                                uint16_t port) {
  // The generation is part of the key: a reload may change where a name resolves to or
  // which addresses are allowed, so connections vetted under an old snapshot are not reused.
  return fmt::format("{}\n{}\n{}\n{}", generation, task, host, port);
}

bool ConnectionPool::reusable(boost::asio::ip::tcp::socket& s) {
  if (!s.is_open()) return false;
  char c;
  ssize_t n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  // 0: the peer closed; >0: bytes we never asked for (a broken or hostile upstream).
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

std::optional<ConnectionPool::Idle> ConnectionPool::take(const std::string& key) {
  auto it = idle_.find(key);
  if (it == idle_.end()) return std::nullopt;
  auto now = std::chrono::steady_clock::now();
  auto& q = it->second;
  std::optional<Idle> out;
  while (!q.empty() && !out) {
    Entry e = std::move(q.back());
    q.pop_back();
    --total_;
    if (now - e.since <= maxIdle_ && reusable(e.conn.socket)) out.emplace(std::move(e.conn));
    // else: the entry's socket closes as it goes out of scope.
  }
  if (q.empty()) idle_.erase(it);
  return out;
}

void ConnectionPool::put(const std::string& key, boost::asio::ip::tcp::socket socket,
                         std::string upstream) {
  if (!reusable(socket)) return;
  if (total_ >= maxTotal_) sweep();
  auto& q = idle_[key];
  if (q.size() >= maxPerKey_ || total_ >= maxTotal_) {
    if (q.empty()) idle_.erase(key);
    return;
  }
  q.push_back({Idle{std::move(socket), std::move(upstream)}, std::chrono::steady_clock::now()});
  ++total_;
}

void ConnectionPool::sweep() {
  auto now = std::chrono::steady_clock::now();
  for (auto it = idle_.begin(); it != idle_.end();) {
    auto& q = it->second;
    while (!q.empty() && now - q.front().since > maxIdle_) {
      q.pop_front();
      --total_;
    }
    it = q.empty() ? idle_.erase(it) : std::next(it);
  }
}

void ConnectionPool::clear() {
  idle_.clear();
  total_ = 0;
}

}  // namespace sandgate::proxy
