// TLS-to-TLS byte relay after a protocol switch (see tls_relay.h).
#include "proxy/intercept/tls_relay.h"

#include <array>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <string>

#include "proxy/exchange/relay.h"
#include "proxy/state/server_context.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using namespace asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kChunk = 16 * 1024;

// What both directions and the idle watch share. The first to end stops the others by
// cancelling every operation on both sockets and the timer: the TLS layers then complete their
// pending operations with operation_aborted.
class Relay {
  DeadlineStream& client_;
  DeadlineStream& upstream_;

 public:
  Relay(DeadlineStream& client, DeadlineStream& upstream, const asio::any_io_executor& ex)
      : client_(client), upstream_(upstream), timer(ex) {}

  void touch() { last = Clock::now(); }
  void end() {
    if (ended) return;
    ended = true;
    client_.cancel();
    upstream_.cancel();
    timer.cancel();
  }
  // Keeps the first error that is not an ordinary end (EOF, close_notify, our own cancel).
  void note(const beast::error_code& ec) {
    if (ended || ec == asio::error::operation_aborted || isPeerClosed(ec)) return;
    if (error.empty()) error = ec.message();
  }

  asio::steady_timer timer;
  Clock::time_point last = Clock::now();
  bool ended = false;
  bool idle = false;
  std::string error;
};

// Writes `bytes` (through `filter` when there is one); false when the relay must end.
asio::awaitable<bool> forward(TlsChannel& to, std::string_view bytes, RelayFilter* filter,
                              std::string& scratch, uint64_t& sent, Relay& r) {
  bool more = true;
  if (filter) {
    scratch.clear();
    more = filter->feed(bytes, scratch);
    if (!more) r.error = filter->error();
    bytes = scratch;
  }
  if (!bytes.empty()) {
    auto [ec, n] = co_await to.write(asio::const_buffer(bytes.data(), bytes.size()));
    sent += n;
    r.touch();
    if (ec) {
      r.note(ec);
      co_return false;
    }
  }
  co_return more;
}

asio::awaitable<void> pump(TlsChannel& from, beast::flat_buffer& early, TlsChannel& to,
                           uint64_t& bytes, Relay& r, RelayFilter* filter) {
  std::string scratch;  // the filter's output
  if (early.size() > 0) {
    const std::string_view pending(static_cast<const char*>(early.data().data()), early.size());
    const bool more = co_await forward(to, pending, filter, scratch, bytes, r);
    early.consume(early.size());
    r.touch();
    if (!more) {
      r.end();
      co_return;
    }
  }
  std::array<char, kChunk> buf;
  while (!r.ended) {
    auto into = asio::buffer(buf);
    auto [ec, n] = co_await from.readSome(into);
    if (n > 0) {
      r.touch();
      if (!co_await forward(to, std::string_view(buf.data(), n), filter, scratch, bytes, r)) {
        break;
      }
    }
    if (ec) {
      r.note(ec);
      break;
    }
  }
  r.end();
}

asio::awaitable<void> watchIdle(Relay& r, Clock::duration idle) {
  while (!r.ended) {
    r.timer.expires_at(r.last + idle);
    auto [ec] = co_await r.timer.async_wait(kUse);
    if (r.ended) break;
    if (!ec && Clock::now() >= r.last + idle) {
      r.idle = true;
      r.end();
    }
  }
}

}  // namespace

asio::awaitable<TunnelResult> relayTls(TlsChannel& client, beast::flat_buffer& clientEarly,
                                       TlsChannel& upstream, beast::flat_buffer& upstreamEarly,
                                       Clock::duration idleTimeout, RelayFilter* down) {
  auto& clientTcp = beast::get_lowest_layer(client);
  auto& upstreamTcp = beast::get_lowest_layer(upstream);
  // The idle watch is the deadline from here on (a quiet WebSocket is not a stuck request).
  clientTcp.expires_never();
  upstreamTcp.expires_never();
  auto ex = co_await asio::this_coro::executor;
  Relay r(clientTcp, upstreamTcp, ex);
  TunnelResult result;
  // Named first: GCC 12 mishandles class-type temporaries inside a co_await expression.
  auto all = pump(client, clientEarly, upstream, result.bytesUp, r, nullptr) &&
             pump(upstream, upstreamEarly, client, result.bytesDown, r, down) &&
             watchIdle(r, idleTimeout);
  co_await std::move(all);
  result.idleTimeout = r.idle;
  result.error = r.error;
  result.spliced = false;
  co_return result;
}

}  // namespace sandgate::proxy
