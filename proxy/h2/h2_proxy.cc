// HTTP/2 on both legs of an intercepted connection (see h2_proxy.h).
//
// Two nghttp2 sessions, a server towards the client and a client towards the upstream, fed
// from two reader coroutines and drained by two writer coroutines (one per leg, so a reader
// never waits on the other leg's socket). Every callback runs on the connection's one thread.
//
// Flow control is passed through, not absorbed: automatic WINDOW_UPDATEs are off on both
// sessions, and a byte is consumed (its window credit returned to the sender) only once it has
// been handed to the other leg. What either side can make sandgate hold per stream is therefore
// one window (kH2StreamWindow) and the scrubber's hold-back, and per connection
// kH2ConnectionWindow.
//
// The upstream's session lives with its socket (H2Upstream::session): a connection taken from
// the pool goes on with the session the last client connection left, pointed at this one.
#include "proxy/h2/h2_proxy.h"

#include <fmt/format.h>
#include <nghttp2/nghttp2.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <map>

#include "proxy/client/client_connection.h"
#include "proxy/exchange/request_credentials.h"
#include "proxy/h2/h2_limits.h"
#include "proxy/h2/h2_request.h"
#include "proxy/h2/h2_stream.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kReadChunk = 16 * 1024;

// One leg: its TLS channel, its session, and its writer's wake-up.
struct Leg {
  explicit Leg(TlsChannel& t, const asio::any_io_executor& ex) : tls(t), wake(ex) {}
  TlsChannel& tls;
  nghttp2_session* session = nullptr;
  asio::steady_timer wake;
  bool dirty = false;
};

}  // namespace

class H2Proxy : public H2Streams {
 public:
  H2Proxy(ClientConnection& c, TlsChannel& client, std::shared_ptr<H2Upstream> up,
          const policy::Target& target, uint16_t port, RequestLog& tunnel,
          const asio::any_io_executor& ex)
      : H2Streams(c, target, port),
        up_(std::move(up)),
        address_(up_->address),
        tunnel_(tunnel),
        client_(client, ex),
        upstream_(up_->tls, ex),
        idle_(ex) {}
  ~H2Proxy();
  // Makes both sessions and queues their SETTINGS; false when nghttp2 could not (memory).
  bool start();
  asio::awaitable<void> run();
  // The upstream connection, handed over when a later client connection may use it: the
  // upstream neither failed, nor broke HTTP/2, nor sent GOAWAY; no stream of it is open and
  // nothing is waiting to be sent on it; every byte read from it reached its session; its
  // stream ids are far from running out. Null otherwise (it then closes with this proxy).
  std::shared_ptr<H2Upstream> reusableUpstream();

 private:
  // H2Streams: what the streams ask of the connection.
  nghttp2_session* clientSession() override { return client_.session; }
  nghttp2_session* upstreamSession() override { return upstream_.session; }
  const std::string& upstreamAddress() const override { return address_; }
  bool upstreamGone() const override { return upDead_; }

  asio::awaitable<void> readLoop(Leg& leg, bool isClient);
  asio::awaitable<void> writeLoop(Leg& leg);
  asio::awaitable<void> watchIdle();
  void kick();
  void end();
  // The upstream connection ended: its streams are answered or reset, and the client told
  // with a GOAWAY that no new stream will be served.
  void upstreamEnded(const std::string& why);
  // The client sent something HTTP/2 forbids at the connection level (nghttp2's error `rv`):
  // GOAWAY, and the reason on the tunnel's audit line.
  void clientFailed(int rv);

  std::shared_ptr<H2Upstream> up_;
  std::string address_;
  RequestLog& tunnel_;
  Leg client_;
  Leg upstream_;
  asio::steady_timer idle_;
  Clock::time_point last_ = Clock::now();
  bool ended_ = false;
  bool upDead_ = false;
  bool drainGoaway_ = false;  // the server is shutting down: GOAWAY sent, no new stream
  bool upLost_ = false;       // bytes read from the upstream never reached its session
};

H2Proxy::~H2Proxy() {
  finishAll("the connection ended");
  if (client_.session) nghttp2_session_del(client_.session);
  // upstream_.session belongs to up_ (H2Upstream::session), pooled or closed with it.
}

bool H2Proxy::start() {
  // A pooled upstream session was set up by the connection that dialled it.
  if (up_->session) {
    nghttp2_session_set_user_data(up_->session, static_cast<H2Streams*>(this));
  } else if (newUpstreamSession(&up_->session) != 0) {
    return false;
  }
  upstream_.session = up_->session;
  return newClientSession(&client_.session) == 0;
}

std::shared_ptr<H2Upstream> H2Proxy::reusableUpstream() {
  // Stream ids are 31 bits and never reused: a connection past half of them is left to close.
  constexpr int32_t kLastReusableId = 1 << 30;
  nghttp2_session* s = upstream_.session;
  if (!up_ || !s || upDead_ || upLost_ || upstreamGoaway() || upstreamOpen() != 0 ||
      nghttp2_session_want_write(s) || !nghttp2_session_want_read(s) ||
      static_cast<int64_t>(nghttp2_session_get_next_stream_id(s)) > kLastReusableId ||
      !up_->tls.quiet()) {
    return nullptr;
  }
  upstream_.session = nullptr;
  return std::move(up_);
}

void H2Proxy::kick() {
  for (Leg* leg : {&client_, &upstream_}) {
    leg->dirty = true;
    leg->wake.cancel();
  }
}

void H2Proxy::end() {
  if (ended_) return;
  ended_ = true;
  client_.tls.next_layer().cancel();
  up_->stream.cancel();
  client_.wake.cancel();
  upstream_.wake.cancel();
  idle_.cancel();
}

void H2Proxy::clientFailed(int rv) {
  auto& rec = tunnel_.record;
  if (rec.error.empty()) {
    rec.reason = reason::kH2ProtocolError;
    rec.error = fmt::format("HTTP/2 connection error: {}", nghttp2_strerror(rv));
  }
  // Queues GOAWAY (a no-op when nghttp2 already has): the writer sends it, then the
  // session wants nothing more and the connection ends.
  nghttp2_session_terminate_session(client_.session, NGHTTP2_PROTOCOL_ERROR);
}

void H2Proxy::upstreamEnded(const std::string& why) {
  if (upDead_) return;
  upDead_ = true;
  failUpstreamStreams(why);
  nghttp2_submit_goaway(client_.session, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(client_.session), NGHTTP2_NO_ERROR,
                        nullptr, 0);
}

asio::awaitable<void> H2Proxy::readLoop(Leg& leg, bool isClient) {
  std::array<uint8_t, kReadChunk> buf;
  while (!ended_) {
    auto [ec, n] = co_await leg.tls.readSome(asio::buffer(buf));
    if (ended_) {
      if (n > 0 && !isClient) upLost_ = true;  // the session would miss these bytes
      break;
    }
    if (n > 0) {
      last_ = Clock::now();
      const ssize_t rv = nghttp2_session_mem_recv(leg.session, buf.data(), n);
      if (rv < 0) {
        if (isClient) {
          clientFailed(static_cast<int>(rv));
        } else {
          upstreamEnded(
              fmt::format("the upstream broke HTTP/2: {}", nghttp2_strerror(static_cast<int>(rv))));
        }
        kick();
        break;
      }
    }
    kick();
    if (ec) {
      if (isClient) {
        end();  // the client is gone: nothing more can reach it
      } else {
        upstreamEnded(fmt::format("{} closed the connection: {}", up_->address, ec.message()));
        kick();
      }
      break;
    }
  }
}

asio::awaitable<void> H2Proxy::writeLoop(Leg& leg) {
  std::string out;
  while (!ended_) {
    leg.dirty = false;
    out.clear();
    while (out.size() < 64 * 1024) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(leg.session, &data);
      if (n <= 0) break;
      out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (!out.empty()) {
      auto [ec, sent] = co_await leg.tls.write(asio::buffer(out));
      if (ec) {
        if (&leg == &client_) {
          end();
        } else {
          upstreamEnded(fmt::format("{}: {}", up_->address, ec.message()));
        }
      }
      kick();  // what was sent may have freed room (a window) for the other leg
      continue;
    }
    // The client's session is done (GOAWAY both ways, no stream left), or the server drains
    // and the last stream has ended: so is the connection.
    if ((!nghttp2_session_want_read(client_.session) &&
         !nghttp2_session_want_write(client_.session)) ||
        (drainGoaway_ && noStreams() && !nghttp2_session_want_write(client_.session))) {
      end();
      break;
    }
    if (leg.dirty) continue;
    leg.wake.expires_at(Clock::time_point::max());
    co_await leg.wake.async_wait(kUse);
  }
}

asio::awaitable<void> H2Proxy::watchIdle() {
  const auto idle = toDuration(c_.limits().idleTimeout);
  // A connection with nothing to do has no event to notice a shutdown by: it looks once a
  // second, so that serve's drain does not wait its whole grace for an idle gRPC channel.
  constexpr auto kDrainLook = std::chrono::seconds(1);
  while (!ended_) {
    idle_.expires_at(std::min(last_ + idle, Clock::now() + kDrainLook));
    auto [ec] = co_await idle_.async_wait(kUse);
    if (ended_) break;
    if (!drainGoaway_ && c_.state.draining.load(std::memory_order_relaxed)) {
      // Graceful: the streams open go on, no new one is taken (RFC 9113 §6.8).
      drainGoaway_ = true;
      nghttp2_submit_goaway(client_.session, NGHTTP2_FLAG_NONE,
                            nghttp2_session_get_last_proc_stream_id(client_.session),
                            NGHTTP2_NO_ERROR, nullptr, 0);
      kick();
    }
    if (!ec && Clock::now() >= last_ + idle) {
      finishAll("idle timeout");
      end();
    }
  }
}

asio::awaitable<void> H2Proxy::run() {
  // The idle watch is the deadline from here on: a quiet gRPC stream is not a stuck request.
  client_.tls.next_layer().expires_never();
  up_->stream.expires_never();
  kick();
  // Named first: GCC 12 mishandles class-type temporaries inside a co_await expression.
  auto all = readLoop(client_, true) && readLoop(upstream_, false) && writeLoop(client_) &&
             writeLoop(upstream_) && watchIdle();
  co_await std::move(all);
}

asio::awaitable<void> serveH2(ClientConnection& c, TlsChannel& client,
                              std::shared_ptr<H2Upstream> up, const policy::Target& target,
                              uint16_t port, RequestLog& tunnel) {
  auto ex = co_await asio::this_coro::executor;
  H2Proxy proxy(c, client, std::move(up), target, port, tunnel, ex);
  if (!proxy.start()) {
    tunnel.record.error = "cannot set up HTTP/2 (out of memory)";
    co_return;
  }
  co_await proxy.run();
  poolH2Upstream(c, proxy.reusableUpstream());
}

}  // namespace sandgate::proxy
