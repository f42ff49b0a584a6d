// The operator HTTP endpoint: /metrics, /healthz and /readyz on their own listener.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <functional>
#include <memory>

#include "proxy/observe/metrics.h"

namespace sandgate::proxy {

// Serves HTTP/1.1 on `acceptor` until it is closed or the coroutine is cancelled
// (terminal cancellation via the co_spawn cancellation slot):
//   GET /metrics → 200 text/plain; version=0.0.4 (Prometheus text exposition)
//   GET /healthz → 200 "ok"           GET /readyz → 200 "ready", or 503 "not ready"
//   any other method → 405 (Allow: GET); any other path → 404; malformed → 400 and close.
// One coroutine per connection on the acceptor's executor, keep-alive, a 10 s deadline per
// request head and per response, an 8 KiB head limit, no request bodies, and at most
// kMaxMetricsConnections at once (more are closed on accept). Accept errors such as EMFILE
// are logged and retried after a pause rather than ending the loop.
// With `admin`, every path under /v1/ goes to it instead (the admin API, admin/admin_api.h), with
// request bodies of up to kMaxAdminBodyBytes; without it those paths are 404 like any other.
inline constexpr int kMaxMetricsConnections = 64;
inline constexpr size_t kMaxAdminBodyBytes = 16 * 1024;
using AdminHandler = std::function<boost::beast::http::response<boost::beast::http::string_body>(
    const boost::beast::http::request<boost::beast::http::string_body>&)>;
boost::asio::awaitable<void> serveMetrics(boost::asio::ip::tcp::acceptor acceptor,
                                          std::shared_ptr<Metrics> m, AdminHandler admin = {});

}  // namespace sandgate::proxy
