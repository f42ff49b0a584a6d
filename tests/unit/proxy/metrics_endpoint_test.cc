// Tests of proxy/metrics_endpoint: the real server on 127.0.0.1 port 0, queried by a Beast
// client: status codes, content, keep-alive, malformed input, connection cap, cancellation.
#include "proxy/observe/metrics_endpoint.h"

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <future>
#include <thread>

namespace sandgate::proxy {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

class MetricsEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics_ = std::make_shared<Metrics>(std::chrono::seconds(60));
    tcp::acceptor acceptor(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    endpoint_ = acceptor.local_endpoint();
    asio::co_spawn(io_, serveMetrics(std::move(acceptor), metrics_),
                   asio::bind_cancellation_slot(
                       stop_.slot(), [this](std::exception_ptr e) { done_.set_value(e); }));
    thread_ = std::thread([this] { io_.run(); });
  }

  void TearDown() override {
    if (!stopped_) stopServer();
    io_.stop();
    thread_.join();
  }

  // Cancels serveMetrics and waits (bounded) for it to return.
  bool stopServer() {
    stopped_ = true;
    asio::post(io_, [this] { stop_.emit(asio::cancellation_type::terminal); });
    auto f = done_.get_future();
    if (f.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return false;
    return f.get() == nullptr;
  }

  tcp::socket connect() {
    tcp::socket s(client_io_);
    s.connect(endpoint_);
    return s;
  }

  static http::response<http::string_body> roundTrip(tcp::socket& s, http::verb method,
                                                     const std::string& target,
                                                     bool keepAlive = true) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.keep_alive(keepAlive);
    http::write(s, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    return res;
  }

  http::response<http::string_body> get(const std::string& target,
                                        http::verb method = http::verb::get) {
    auto s = connect();
    return roundTrip(s, method, target, false);
  }

  // True when the server closes `s` without sending anything more.
  static bool closedByPeer(tcp::socket& s) {
    char c;
    boost::system::error_code ec;
    size_t n = s.read_some(asio::buffer(&c, 1), ec);
    return n == 0 && (ec == asio::error::eof || ec == asio::error::connection_reset);
  }

  asio::io_context io_;
  asio::io_context client_io_;
  std::shared_ptr<Metrics> metrics_;
  tcp::endpoint endpoint_;
  asio::cancellation_signal stop_;
  std::promise<std::exception_ptr> done_;
  std::thread thread_;
  bool stopped_ = false;
};

TEST_F(MetricsEndpointTest, MetricsAreServedInTextFormat) {
  metrics_->task("demo")->request("forward", "allow", "allowed");
  auto res = get("/metrics");
  EXPECT_EQ(res.result(), http::status::ok);
  EXPECT_EQ(res[http::field::content_type], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(res.body().find("sandgate_requests_total{kind=\"forward\",reason=\"allowed\","
                            "task=\"demo\",verdict=\"allow\"} 1"),
            std::string::npos)
      << res.body();
  EXPECT_NE(res.body().find("sandgate_build_info{"), std::string::npos);
  EXPECT_EQ(get("/metrics?name[]=x").result(), http::status::ok);  // scrapers may add a query
}

TEST_F(MetricsEndpointTest, HealthAndReadiness) {
  auto health = get("/healthz");
  EXPECT_EQ(health.result(), http::status::ok);
  EXPECT_EQ(health.body(), "ok");
  EXPECT_EQ(get("/readyz").result(), http::status::service_unavailable);
  metrics_->setReady(true);
  EXPECT_EQ(get("/readyz").result(), http::status::ok);
  metrics_->setReady(false);
  EXPECT_EQ(get("/readyz").result(), http::status::service_unavailable);
}

TEST_F(MetricsEndpointTest, UnknownPathsAndMethods) {
  struct Case {
    const char* name;
    http::verb method;
    const char* target;
    http::status want;
  };
  for (const Case& c :
       {Case{"unknown_path", http::verb::get, "/nope", http::status::not_found},
        Case{"prefix_is_not_a_match", http::verb::get, "/metricsx", http::status::not_found},
        Case{"root", http::verb::get, "/", http::status::not_found},
        Case{"post_metrics", http::verb::post, "/metrics", http::status::method_not_allowed},
        Case{"delete_healthz", http::verb::delete_, "/healthz", http::status::method_not_allowed},
        Case{"head_readyz", http::verb::head, "/readyz", http::status::method_not_allowed}}) {
    auto s = connect();
    http::request<http::string_body> req{c.method, c.target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.keep_alive(false);
    http::write(s, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.skip(c.method == http::verb::head);
    http::read(s, buf, parser);
    EXPECT_EQ(parser.get().result(), c.want) << c.name;
    if (c.want == http::status::method_not_allowed) {
      EXPECT_EQ(parser.get()[http::field::allow], "GET") << c.name;
    }
  }
}

TEST_F(MetricsEndpointTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  auto s = connect();
  for (int i = 0; i < 3; ++i) {
    auto res = roundTrip(s, http::verb::get, i == 1 ? "/metrics" : "/healthz");
    EXPECT_EQ(res.result(), http::status::ok);
    EXPECT_TRUE(res.keep_alive());
  }
  auto last = roundTrip(s, http::verb::get, "/healthz", false);
  EXPECT_FALSE(last.keep_alive());
  EXPECT_TRUE(closedByPeer(s));
}

TEST_F(MetricsEndpointTest, MalformedRequestGets400AndClose) {
  auto s = connect();
  asio::write(s,
              asio::buffer(std::string("GET /metrics HTTP/1.1\r\nHost: x\r\nbad header\r\n\r\n")));
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(s, buf, res);
  EXPECT_EQ(res.result(), http::status::bad_request);
  EXPECT_TRUE(closedByPeer(s));
}

TEST_F(MetricsEndpointTest, OversizedHeadIsRefused) {
  auto s = connect();
  std::string req =
      "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(16 * 1024, 'a') + "\r\n\r\n";
  boost::system::error_code ec;
  asio::write(s, asio::buffer(req), ec);  // the server may close before reading it all
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(s, buf, res, ec);
  if (!ec) {
    EXPECT_EQ(res.result(), http::status::bad_request);
  } else {
    EXPECT_TRUE(ec == asio::error::connection_reset || ec == http::error::end_of_stream) << ec;
  }
  EXPECT_TRUE(ec || closedByPeer(s));
}

TEST_F(MetricsEndpointTest, RequestBodiesAreRefused) {
  auto s = connect();
  asio::write(s, asio::buffer(std::string(
                     "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")));
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(s, buf, res);
  EXPECT_EQ(res.result(), http::status::bad_request);
}

TEST_F(MetricsEndpointTest, ConnectionsBeyondTheCapAreClosed) {
  std::vector<tcp::socket> held;
  for (int i = 0; i < kMaxMetricsConnections; ++i) {
    held.push_back(connect());
    // A response proves the server has accepted and counted this connection.
    ASSERT_EQ(roundTrip(held.back(), http::verb::get, "/healthz").result(), http::status::ok);
  }
  auto extra = connect();
  EXPECT_TRUE(closedByPeer(extra));
  // Once one closes, a new connection is served again (the server notices the close
  // asynchronously, so allow it a bounded number of attempts).
  held.front().close();
  bool served = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!served && std::chrono::steady_clock::now() < deadline) {
    auto s = connect();
    boost::system::error_code ec;
    http::request<http::string_body> req{http::verb::get, "/healthz", 11};
    http::write(s, req, ec);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    if (!ec) http::read(s, buf, res, ec);
    served = !ec && res.result() == http::status::ok;
  }
  EXPECT_TRUE(served);
}

TEST_F(MetricsEndpointTest, AnIdleConnectionDoesNotBlockOthers) {
  // One coroutine per connection: a client that sends nothing must not stall a scrape (if it
  // did, the get() below would hang until CTest's timeout).
  auto idle = connect();
  EXPECT_EQ(get("/healthz").result(), http::status::ok);
}

TEST_F(MetricsEndpointTest, CancellationEndsTheServer) {
  EXPECT_EQ(get("/healthz").result(), http::status::ok);
  ASSERT_TRUE(stopServer());
  tcp::socket s(client_io_);
  boost::system::error_code ec;
  s.connect(endpoint_, ec);
  EXPECT_EQ(ec, asio::error::connection_refused);  // the acceptor was closed with the loop
}

}  // namespace
}  // namespace sandgate::proxy
