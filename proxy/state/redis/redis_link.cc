// The link's thread: connect, authenticate, pipeline the queued commands (see redis_link.h).
// The thread runs its own io_context one operation at a time with run_for(), so every
// connect, handshake, write and read has the link's timeout without a timer per operation.
#include "proxy/state/redis/redis_link.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>

#include "proxy/net/upstream_tls.h"

namespace sandgate::proxy::redis {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

// The connection: plain TCP, or TLS over it.
struct Conn {
  asio::io_context& ioc;
  std::optional<tcp::socket> plain;
  std::optional<asio::ssl::stream<tcp::socket>> tls;
  std::chrono::milliseconds timeout;

  tcp::socket& lowest() { return tls ? tls->next_layer() : *plain; }

  // Runs the operation started by `start` (given its completion) for at most the timeout; on
  // timeout the socket is closed, which ends the operation.
  template <class Start>
  error_code runFor(Start&& start) {
    error_code result = asio::error::timed_out;
    bool done = false;
    start([&](error_code ec, auto&&...) {
      result = ec;
      done = true;
    });
    ioc.restart();
    ioc.run_for(timeout);
    if (!done) {
      error_code ignored;
      lowest().close(ignored);
      ioc.restart();
      ioc.run();
      return asio::error::timed_out;
    }
    return result;
  }

  error_code write(const std::string& bytes) {
    return runFor([&](auto h) {
      if (tls) {
        asio::async_write(*tls, asio::buffer(bytes), h);
      } else {
        asio::async_write(*plain, asio::buffer(bytes), h);
      }
    });
  }

  // Reads until `want` replies are decoded (or the timeout passes for one read).
  error_code read(ReplyReader& reader, size_t want, std::vector<Reply>& out) {
    char buf[16384];
    while (out.size() < want) {
      bool failed = false;
      while (out.size() < want) {
        auto r = reader.next(failed);
        if (failed) return asio::error::invalid_argument;
        if (!r) break;
        out.push_back(std::move(*r));
      }
      if (out.size() >= want) break;
      size_t n = 0;
      auto ec = runFor([&](auto h) {
        auto wrap = [&, h](error_code e, size_t got) mutable {
          n = got;
          h(e);
        };
        if (tls) {
          tls->async_read_some(asio::buffer(buf), wrap);
        } else {
          plain->async_read_some(asio::buffer(buf), wrap);
        }
      });
      if (ec) return ec;
      if (!reader.feed(std::string_view(buf, n))) return asio::error::invalid_argument;
    }
    return {};
  }
};

}  // namespace

Link::Link(config::RedisState cfg, std::string password, asio::ssl::context* tls,
           std::shared_ptr<const void> tlsOwner, LinkOptions opts)
    : cfg_(std::move(cfg)),
      password_(std::move(password)),
      tls_(tls),
      tlsOwner_(std::move(tlsOwner)),
      opts_(opts) {
  thread_ = std::thread([this] { run(); });
  std::unique_lock lk(mu_);
  firstTry_.wait_for(lk, opts_.timeout * 6, [&] { return tried_; });
}

Link::~Link() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // The password is wiped: this copy lived only for AUTH.
  std::fill(password_.begin(), password_.end(), '\0');
}

std::string Link::lastError() const {
  std::lock_guard lk(mu_);
  return lastError_;
}

std::optional<std::vector<Reply>> Link::call(std::vector<std::string> encoded) {
  if (!up()) return std::nullopt;
  auto job = std::make_shared<Job>();
  job->replies = encoded.size();
  for (auto& e : encoded) job->bytes += e;
  auto fut = job->done.get_future();
  {
    std::lock_guard lk(mu_);
    if (stop_) return std::nullopt;
    queue_.push_back(job);
  }
  cv_.notify_one();
  // Twice the timeout: the link's own timeout ends a stuck read, and answers then.
  if (fut.wait_for(opts_.timeout * 2 + std::chrono::milliseconds(50)) !=
      std::future_status::ready) {
    return std::nullopt;
  }
  return fut.get();
}

void Link::run() {
  auto backoff = opts_.minBackoff;
  while (!stop_) {
    if (session()) backoff = opts_.minBackoff;
    up_ = false;
    std::unique_lock lk(mu_);
    tried_ = true;
    firstTry_.notify_all();
    // What was queued when the link went down is answered at once: its callers fail by mode.
    for (auto& j : queue_) j->done.set_value(std::nullopt);
    queue_.clear();
    cv_.wait_for(lk, backoff, [&] { return stop_.load(); });
    backoff = std::min(backoff * 2, opts_.maxBackoff);
  }
  std::lock_guard lk(mu_);
  for (auto& j : queue_) j->done.set_value(std::nullopt);
  queue_.clear();
}

bool Link::session() {
  asio::io_context ioc;
  Conn c{ioc, std::nullopt, std::nullopt, opts_.timeout};
  auto fail = [&](std::string why) {
    std::lock_guard lk(mu_);
    if (why != lastError_) spdlog::warn("state.redis {}:{}: {}", cfg_.host, cfg_.port, why);
    lastError_ = std::move(why);
    return false;
  };
  tcp::resolver resolver(ioc);
  tcp::resolver::results_type endpoints;
  auto ec = c.runFor([&](auto h) {
    resolver.async_resolve(cfg_.host, std::to_string(cfg_.port),
                           [&, h](error_code e, tcp::resolver::results_type r) mutable {
                             endpoints = std::move(r);
                             h(e);
                           });
  });
  if (ec) return fail(fmt::format("cannot resolve: {}", ec.message()));
  c.plain.emplace(ioc);
  ec = c.runFor([&](auto h) {
    asio::async_connect(*c.plain, endpoints,
                        [h](error_code e, const tcp::endpoint&) mutable { h(e); });
  });
  if (ec) return fail(fmt::format("cannot connect: {}", ec.message()));
  error_code ignored;
  c.plain->set_option(tcp::no_delay(true), ignored);
  if (cfg_.tls) {
    if (!tls_) return fail("rediss:// without a TLS context");
    c.tls.emplace(std::move(*c.plain), *tls_);
    c.plain.reset();
    error_code parsed;
    asio::ip::make_address(cfg_.host, parsed);
    // The certificate must name the URL's host (or address), like an upstream's.
    if (!verifyPeerAs(c.tls->native_handle(), cfg_.host, !parsed)) {
      return fail("cannot set up TLS verification");
    }
    ec = c.runFor([&](auto h) { c.tls->async_handshake(asio::ssl::stream_base::client, h); });
    if (ec) return fail(fmt::format("TLS handshake failed: {}", ec.message()));
  }
  ReplyReader reader;
  std::vector<std::string> hello;
  if (!password_.empty()) hello.push_back(formatCommand({"AUTH", password_}));
  hello.push_back(formatCommand({"SELECT", std::to_string(cfg_.db)}));
  std::string bytes;
  for (auto& h : hello) bytes += h;
  std::fill(hello.front().begin(), hello.front().end(), '\0');
  std::vector<Reply> replies;
  ec = c.write(bytes);
  std::fill(bytes.begin(), bytes.end(), '\0');
  if (!ec) ec = c.read(reader, hello.size(), replies);
  if (ec) return fail(fmt::format("no answer to AUTH/SELECT: {}", ec.message()));
  for (const auto& r : replies) {
    // The error code only (WRONGPASS, NOAUTH, ...): Redis's message never holds the password,
    // but nothing of the exchange is worth the risk in a log.
    if (r.isError()) return fail(fmt::format("refused at login: {}", r.errorCode()));
  }
  {
    std::lock_guard lk(mu_);
    if (!lastError_.empty()) spdlog::info("state.redis {}:{}: connected", cfg_.host, cfg_.port);
    lastError_.clear();
  }
  {
    std::lock_guard lk(mu_);
    up_ = true;
    tried_ = true;
  }
  firstTry_.notify_all();
  while (!stop_) {
    std::vector<std::shared_ptr<Job>> jobs;
    {
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stop_ || !queue_.empty(); });
      if (stop_) break;
      jobs.assign(queue_.begin(), queue_.end());
      queue_.clear();
    }
    // Idle: a PING finds a dropped connection before a request does.
    std::string out;
    size_t want = 0;
    if (jobs.empty()) {
      out = formatCommand({"PING"});
      want = 1;
    }
    for (auto& j : jobs) {
      out += j->bytes;
      want += j->replies;
    }
    std::vector<Reply> got;
    ec = c.write(out);
    if (!ec) ec = c.read(reader, want, got);
    if (ec) {
      for (auto& j : jobs) j->done.set_value(std::nullopt);
      fail(fmt::format("connection lost: {}", ec.message()));
      return true;
    }
    size_t at = jobs.empty() ? 1 : 0;
    for (auto& j : jobs) {
      std::vector<Reply> mine(std::make_move_iterator(got.begin() + at),
                              std::make_move_iterator(got.begin() + at + j->replies));
      at += j->replies;
      j->done.set_value(std::move(mine));
    }
  }
  return true;
}

}  // namespace sandgate::proxy::redis
