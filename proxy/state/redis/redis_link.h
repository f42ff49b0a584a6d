// One connection to the shared Redis of `state.redis`, kept up by a thread of its own: it
// connects (TLS verified like an upstream for rediss://), sends AUTH with the password from the
// secret store and SELECT, and reconnects with backoff when the connection drops. Callers on
// the proxy's workers hand it commands and wait for the reply at most `timeout`: while the
// link is down they get no reply at once (they never wait on a connect), which the budget
// counter turns into its fail mode.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "proxy/state/redis/resp.h"

namespace boost::asio::ssl {
class context;
}

namespace sandgate::proxy::redis {

struct LinkOptions {
  std::chrono::milliseconds timeout{250};  // a command's reply, and a connect
  std::chrono::milliseconds minBackoff{50}, maxBackoff{2000};
};

class Link {
 public:
  // `password`: the AUTH password (empty: none). `tls`: the verifying client context for
  // rediss:// (kept alive by `tlsOwner`), null for redis://.
  Link(config::RedisState cfg, std::string password, boost::asio::ssl::context* tls,
       std::shared_ptr<const void> tlsOwner, LinkOptions opts = {});
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // Sends the commands (pipelined, in order) and waits for their replies: nullopt when the link
  // is down, or no reply came within the timeout (then the connection is dropped and made
  // again).
  std::optional<std::vector<Reply>> call(std::vector<std::string> encoded);
  bool up() const { return up_.load(std::memory_order_relaxed); }
  // Why the link was last down ("connection refused", "AUTH refused: WRONGPASS ..."), for logs
  // and tests; never holds the password.
  std::string lastError() const;

 private:
  struct Job {
    std::string bytes;
    size_t replies = 0;
    std::promise<std::optional<std::vector<Reply>>> done;
  };
  void run();      // the link's thread
  bool session();  // one connection's life; false when it could not be made

  config::RedisState cfg_;
  std::string password_;
  boost::asio::ssl::context* tls_;
  std::shared_ptr<const void> tlsOwner_;
  LinkOptions opts_;
  std::atomic<bool> up_{false};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable firstTry_;  // the constructor waits for the first connect to end
  bool tried_ = false;
  std::deque<std::shared_ptr<Job>> queue_;
  std::string lastError_;
  std::thread thread_;
};

}  // namespace sandgate::proxy::redis
