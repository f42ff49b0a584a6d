// The operator HTTP endpoint (/metrics, /healthz, /readyz): a small Beast server.
#include "proxy/observe/metrics_endpoint.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>

namespace sandgate::proxy {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr auto kDeadline = std::chrono::seconds(10);
constexpr uint32_t kHeaderLimit = 8 * 1024;

http::response<http::string_body> respond(const http::request<http::string_body>& req, Metrics& m) {
  http::response<http::string_body> res;
  res.version(11);
  res.keep_alive(req.keep_alive());
  res.set(http::field::server, "sandgate");
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  std::string_view target = req.target();
  if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  if (req.method() != http::verb::get) {
    res.result(http::status::method_not_allowed);
    res.set(http::field::allow, "GET");
    res.body() = "method not allowed\n";
  } else if (target == "/metrics") {
    res.result(http::status::ok);
    res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res.body() = m.render();
  } else if (target == "/healthz") {
    res.result(http::status::ok);
    res.body() = "ok";
  } else if (target == "/readyz") {
    bool ready = m.ready();
    res.result(ready ? http::status::ok : http::status::service_unavailable);
    res.body() = ready ? "ready" : "not ready";
  } else {
    res.result(http::status::not_found);
    res.body() = "not found\n";
  }
  res.prepare_payload();
  return res;
}

asio::awaitable<void> session(beast::tcp_stream stream, std::shared_ptr<Metrics> m,
                              std::shared_ptr<std::atomic<int>> active,
                              std::shared_ptr<const AdminHandler> admin) {
  struct Release {
    std::atomic<int>& n;
    ~Release() { n.fetch_sub(1, std::memory_order_relaxed); }
  } release{*active};
  beast::flat_buffer buffer(kHeaderLimit);
  beast::error_code ec;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(kHeaderLimit);
    // Nothing but the admin API takes a body.
    parser.body_limit(*admin ? kMaxAdminBodyBytes : 0);
    stream.expires_after(kDeadline);
    co_await http::async_read(stream, buffer, parser,
                              asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
      break;
    }
    if (ec) {
      // Malformed or oversized head: say so once, then close (no resynchronising).
      http::response<http::string_body> bad{http::status::bad_request, 11};
      bad.set(http::field::content_type, "text/plain; charset=utf-8");
      bad.set(http::field::connection, "close");
      bad.body() = "bad request\n";
      bad.prepare_payload();
      stream.expires_after(kDeadline);
      co_await http::async_write(stream, bad, asio::redirect_error(asio::use_awaitable, ec));
      break;
    }
    const auto& req = parser.get();
    auto res = *admin && req.target().starts_with("/v1/") ? (*admin)(req) : respond(req, *m);
    stream.expires_after(kDeadline);
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.close();
}

}  // namespace

asio::awaitable<void> serveMetrics(tcp::acceptor acceptor, std::shared_ptr<Metrics> m,
                                   AdminHandler admin) {
  auto active = std::make_shared<std::atomic<int>>(0);
  auto shared = std::make_shared<const AdminHandler>(std::move(admin));
  auto executor = co_await asio::this_coro::executor;
  for (;;) {
    beast::error_code ec;
    tcp::socket socket =
        co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor ||
        !acceptor.is_open()) {
      co_return;  // closed or cancelled: the server is shutting down
    }
    if (ec) {
      // EMFILE and friends: retrying at once would spin; the pause lets descriptors free up.
      spdlog::warn("metrics endpoint: accept failed: {}", ec.message());
      asio::steady_timer pause(executor, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted) co_return;
      continue;
    }
    if (active->fetch_add(1, std::memory_order_relaxed) >= kMaxMetricsConnections) {
      active->fetch_sub(1, std::memory_order_relaxed);
      socket.close(ec);  // a scraper needs one connection; this is a flood
      continue;
    }
    asio::co_spawn(socket.get_executor(),
                   session(beast::tcp_stream(std::move(socket)), m, active, shared),
                   asio::detached);
  }
}

}  // namespace sandgate::proxy
