// The sandbox's DNS stub on the wire: UDP and TCP, bounded buffers, deadlines, no forwarding.
#include "proxy/capture_server/dns_server.h"

#include <spdlog/spdlog.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "proxy/net/completion.h"
#include "proxy/net/endpoint.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
using asio::ip::tcp;
using asio::ip::udp;

namespace {

constexpr auto kTcpReadTimeout = std::chrono::seconds(10);  // RFC 7766 suggests seconds
constexpr int kMaxQueriesPerTcpConnection = 100;
constexpr size_t kMaxTcpConnections = 64;  // per sandbox: the stub needs one or two

std::string udpText(const udp::endpoint& ep) {
  return endpointText(tcp::endpoint(ep.address(), ep.port()));
}

asio::awaitable<void> serveDnsTcpConnection(tcp::socket socket,
                                            std::shared_ptr<CaptureContext> capture,
                                            std::shared_ptr<std::atomic<size_t>> open) {
  boost::system::error_code ec;
  auto peer = socket.remote_endpoint(ec);
  std::string client = ec ? "unknown" : endpointText(peer);
  auto local = socket.local_endpoint(ec);
  std::string listener = (ec ? std::string("unknown") : endpointText(local)) + "/tcp";
  beast::tcp_stream stream(std::move(socket));
  std::array<uint8_t, capture::dns::kMaxMessageBytes> buf;
  for (int i = 0; i < kMaxQueriesPerTcpConnection; ++i) {
    std::array<uint8_t, 2> len;
    stream.expires_after(kTcpReadTimeout);
    // Buffers are named, never temporaries in a co_await expression (GCC 12, see session.cc).
    auto lenBuf = asio::buffer(len);
    auto [rec, rn] = co_await asio::async_read(stream, lenBuf, kUse);
    if (rec) break;
    size_t n = static_cast<size_t>(len[0]) << 8 | len[1];
    if (n > buf.size()) {
      // Larger than any query: count it as malformed and end the connection without
      // reading it (it cannot be skipped cheaply, and a stub never sends one).
      auto bad = capture->answer({}, true, client, listener);
      (void)bad;
      break;
    }
    auto bodyBuf = asio::buffer(buf.data(), n);
    auto [bec, bn] = co_await asio::async_read(stream, bodyBuf, kUse);
    if (bec) break;
    auto out = capture->answer(std::span<const uint8_t>(buf.data(), n), true, client, listener);
    if (out.response.empty()) break;  // malformed: drop it, and the stream is out of step
    std::array<uint8_t, 2> outLen = {static_cast<uint8_t>(out.response.size() >> 8),
                                     static_cast<uint8_t>(out.response.size())};
    std::array<asio::const_buffer, 2> bufs = {asio::buffer(outLen), asio::buffer(out.response)};
    stream.expires_after(kTcpReadTimeout);
    auto [wec, wn] = co_await asio::async_write(stream, bufs, kUse);
    if (wec) break;
  }
  stream.socket().close(ec);
  open->fetch_sub(1);
}

}  // namespace

asio::awaitable<void> serveDnsUdp(std::shared_ptr<udp::socket> socket,
                                  std::shared_ptr<CaptureContext> capture) {
  boost::system::error_code ec;
  auto local = socket->local_endpoint(ec);
  const std::string listener = (ec ? std::string("unknown") : udpText(local)) + "/udp";
  // One byte more than any query we accept: a datagram that fills it is oversized (malformed).
  std::array<uint8_t, capture::dns::kMaxMessageBytes + 1> buf;
  udp::endpoint from;
  while (socket->is_open()) {
    auto in = asio::buffer(buf);
    auto [rec, n] = co_await socket->async_receive_from(in, from, kUse);
    if (rec == asio::error::operation_aborted || !socket->is_open()) co_return;
    if (rec) continue;  // e.g. ECONNREFUSED from an earlier reply's ICMP: nothing to do
    auto out =
        capture->answer(std::span<const uint8_t>(buf.data(), n), false, udpText(from), listener);
    if (out.response.empty()) continue;
    // A reply to a sender that is gone is simply lost, as UDP replies are.
    auto reply = asio::buffer(out.response);
    auto [sec, sn] = co_await socket->async_send_to(reply, from, kUse);
    (void)sec;
  }
}

asio::awaitable<void> serveDnsTcp(std::shared_ptr<tcp::acceptor> acceptor,
                                  std::shared_ptr<CaptureContext> capture) {
  auto open = std::make_shared<std::atomic<size_t>>(0);
  while (acceptor->is_open()) {
    auto [ec, socket] = co_await acceptor->async_accept(kUse);
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) co_return;
    if (ec) {
      asio::steady_timer backoff(acceptor->get_executor());
      backoff.expires_after(std::chrono::milliseconds(100));
      co_await backoff.async_wait(kUse);
      continue;
    }
    if (open->load() >= kMaxTcpConnections) continue;  // closes it: the stub retries or uses UDP
    open->fetch_add(1);
    asio::co_spawn(acceptor->get_executor(),
                   serveDnsTcpConnection(std::move(socket), capture, open), asio::detached);
  }
}

}  // namespace sandgate::proxy
