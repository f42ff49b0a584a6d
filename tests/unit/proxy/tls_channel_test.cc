// TlsChannel (proxy/net/tls_channel.h): a client and a server channel on a loopback TCP pair, with
// a leaf minted by an ephemeral CA: handshake and verification, data both ways, close_notify,
// a connection cut without one, the deadline, a reader and a writer on one channel at once, and
// a second write that waits behind a send the socket holds up.
#include "proxy/net/tls_channel.h"

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "ca/tls_ca.h"

namespace sandgate::proxy {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using namespace std::chrono_literals;

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;

class TlsChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = CertificateAuthority::createEphemeral();
    ASSERT_TRUE(ca.ok()) << ca.errorText();
    ca_ = ca.value();
    std::string error;
    leaf_ = ca_->mint("api.test", &error);
    ASSERT_TRUE(leaf_) << error;
    serverCtx_.reset(SSL_CTX_new(TLS_server_method()));
    ASSERT_TRUE(leaf_->applyTo(serverCtx_.get()));
    clientCtx_.reset(SSL_CTX_new(TLS_client_method()));
    X509_STORE_add_cert(SSL_CTX_get_cert_store(clientCtx_.get()), ca_->certificate());
    SSL_CTX_set_verify(clientCtx_.get(), SSL_VERIFY_PEER, nullptr);

    tcp::acceptor acceptor(io_, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    tcp::socket c(io_), s(io_);
    c.connect(acceptor.local_endpoint());
    acceptor.accept(s);
    clientTcp_.emplace(std::move(c));
    serverTcp_.emplace(std::move(s));
    client_.emplace(*clientTcp_, clientCtx_.get(), TlsChannel::Role::kClient);
    server_.emplace(*serverTcp_, serverCtx_.get(), TlsChannel::Role::kServer);
  }

  // Runs `f` as a coroutine on the loop until it returns (at most 10 s).
  template <class F>
  void run(F f) {
    bool done = false;
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
          co_await f();
          done = true;
        },
        asio::detached);
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (!done && std::chrono::steady_clock::now() < end) {
      io_.restart();
      io_.run_for(5ms);
    }
    ASSERT_TRUE(done) << "timed out";
  }

  // Both handshakes, the client verifying `name`.
  void handshake(const char* name, error_code& clientEc, error_code& serverEc) {
    SSL_set_tlsext_host_name(client_->native_handle(), name);
    X509_VERIFY_PARAM_set1_host(SSL_get0_param(client_->native_handle()), name, 0);
    std::optional<error_code> s;
    asio::co_spawn(
        io_, [&]() -> asio::awaitable<void> { s = co_await server_->handshake(); }, asio::detached);
    run([&]() -> asio::awaitable<void> { clientEc = co_await client_->handshake(); });
    run([&]() -> asio::awaitable<void> {
      while (!s) co_await asio::post(io_, asio::use_awaitable);
    });
    serverEc = *s;
  }

  // Both handshakes succeeded for the leaf's own name.
  bool connected() {
    error_code c, s;
    handshake("api.test", c, s);
    return !c && !s;
  }

  // One read of up to 16 bytes from `ch`: how it ended.
  error_code readOnce(TlsChannel& ch) {
    error_code result;
    run([&]() -> asio::awaitable<void> {
      char b[16];
      const asio::mutable_buffer into(b, sizeof b);
      auto [ec, n] = co_await ch.readSome(into);
      result = ec;
    });
    return result;
  }

  // Reads from `ch` until `want` bytes or an error.
  static asio::awaitable<std::pair<error_code, std::string>> readAll(TlsChannel& ch, size_t want) {
    std::string got;
    char buf[4096];
    while (got.size() < want) {
      const asio::mutable_buffer into(buf, sizeof buf);
      auto [ec, n] = co_await ch.readSome(into);
      got.append(buf, n);
      if (ec) co_return std::pair{ec, got};
    }
    co_return std::pair{error_code{}, got};
  }

  asio::io_context io_;
  std::shared_ptr<const CertificateAuthority> ca_;
  std::shared_ptr<const Leaf> leaf_;
  SslCtxPtr serverCtx_, clientCtx_;
  std::optional<DeadlineStream> clientTcp_, serverTcp_;
  std::optional<TlsChannel> client_, server_;
};

TEST_F(TlsChannelTest, DataBothWaysThenCloseNotify) {
  ASSERT_TRUE(connected());
  const std::string big(200 * 1024, 'x');  // many records, more than a socket buffer may hold
  run([&]() -> asio::awaitable<void> {
    const asio::const_buffer hello("hello", 5);
    auto [wec, wn] = co_await client_->write(hello);
    EXPECT_FALSE(wec);
    EXPECT_EQ(wn, 5u);
    auto [rec, got] = co_await readAll(*server_, 5);
    EXPECT_FALSE(rec);
    EXPECT_EQ(got, "hello");
  });
  std::optional<std::pair<error_code, std::string>> received;
  asio::co_spawn(
      io_, [&]() -> asio::awaitable<void> { received = co_await readAll(*client_, big.size()); },
      asio::detached);
  run([&]() -> asio::awaitable<void> {
    const asio::const_buffer out(big.data(), big.size());
    auto [ec, n] = co_await server_->write(out);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(n, big.size());
    co_await server_->shutdown();
  });
  run([&]() -> asio::awaitable<void> {
    while (!received) co_await asio::post(io_, asio::use_awaitable);
  });
  EXPECT_FALSE(received->first) << received->first.message();
  EXPECT_EQ(received->second, big);
  EXPECT_EQ(readOnce(*client_), asio::error::eof);  // the server's close_notify
  EXPECT_TRUE(client_->quiet());
}

// The peer sent close_notify and keeps the TCP connection open: every later read ends at once
// with eof, none waits for bytes that will never come.
TEST_F(TlsChannelTest, ReadsAfterCloseNotifyEndAtOnce) {
  ASSERT_TRUE(connected());
  run([&]() -> asio::awaitable<void> { co_await server_->shutdown(); });
  clientTcp_->expires_after(5s);
  EXPECT_EQ(readOnce(*client_), asio::error::eof);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(readOnce(*client_), asio::error::eof);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

TEST_F(TlsChannelTest, WrongNameFailsTheClientHandshake) {
  error_code c, s;
  handshake("other.test", c, s);
  EXPECT_TRUE(c);
  EXPECT_EQ(SSL_get_verify_result(client_->native_handle()), X509_V_ERR_HOSTNAME_MISMATCH);
  EXPECT_TRUE(s);  // the server got the client's alert (or the cut)
}

TEST_F(TlsChannelTest, CutWithoutCloseNotifyIsTruncation) {
  ASSERT_TRUE(connected());
  serverTcp_->close();
  EXPECT_EQ(readOnce(*client_), asio::ssl::error::stream_truncated);
}

// An error other OpenSSL work on the thread left queued (a failed handshake of another
// connection, a certificate check) must not be read as this channel's: a read that finds only
// part of a record goes on waiting for the rest, it does not fail.
TEST_F(TlsChannelTest, AnErrorLeftQueuedByOtherWorkIsNotThisChannels) {
  ASSERT_TRUE(connected());
  // What the server sent after its handshake (session tickets) is read first, with a byte of
  // data: OpenSSL empties the queue itself when it handles handshake messages. (A read that
  // times out would close the socket.)
  run([&]() -> asio::awaitable<void> {
    const asio::const_buffer one("x", 1);
    auto [wec, wn] = co_await server_->write(one);
    EXPECT_FALSE(wec);
    auto [rec, got] = co_await readAll(*client_, 1);
    EXPECT_FALSE(rec);
    EXPECT_EQ(got, "x");
  });
  const unsigned char partial[] = {0x17, 0x03, 0x03, 0x00, 0x40, 0x01, 0x02};  // of 69 bytes
  ASSERT_EQ(serverTcp_->socket().send(asio::buffer(partial)), sizeof partial);
  ERR_raise(ERR_LIB_USER, 1);
  ASSERT_NE(ERR_peek_error(), 0u);
  clientTcp_->expires_after(300ms);
  EXPECT_EQ(readOnce(*client_), boost::beast::error::timeout);
  EXPECT_EQ(ERR_peek_error(), 0u);
}

TEST_F(TlsChannelTest, ReadPastTheDeadlineTimesOut) {
  ASSERT_TRUE(connected());
  clientTcp_->expires_after(100ms);
  EXPECT_EQ(readOnce(*client_), boost::beast::error::timeout);
}

// The WebSocket relay reads and writes one channel at the same time.
TEST_F(TlsChannelTest, AReaderAndAWriterOnOneChannel) {
  ASSERT_TRUE(connected());
  std::optional<std::pair<error_code, std::string>> clientGot;
  asio::co_spawn(
      io_, [&]() -> asio::awaitable<void> { clientGot = co_await readAll(*client_, 3); },
      asio::detached);
  run([&]() -> asio::awaitable<void> {
    const asio::const_buffer ping("ping", 4);
    auto [wec, wn] = co_await client_->write(ping);  // while the client's read waits
    EXPECT_FALSE(wec);
    auto [rec, got] = co_await readAll(*server_, 4);
    EXPECT_EQ(got, "ping");
    const asio::const_buffer pong("pon", 3);
    auto [w2, n2] = co_await server_->write(pong);
    EXPECT_FALSE(w2);
    while (!clientGot) co_await asio::post(io_, asio::use_awaitable);
  });
  EXPECT_FALSE(clientGot->first);
  EXPECT_EQ(clientGot->second, "pon");
}

// A send the socket holds up (its peer not reading yet) carries the records of what the
// channel writes meanwhile (here a second write; in the WebSocket relay, the other direction's
// close_notify): that writer waits for it and shares its outcome, and the bytes arrive whole
// and in order once the peer reads.
TEST_F(TlsChannelTest, AWriteWaitsBehindASendTheSocketHoldsUp) {
  ASSERT_TRUE(connected());
  // Small socket buffers, so that one write's records (at most 64 KiB are encrypted before a
  // send) do not fit.
  serverTcp_->socket().set_option(asio::socket_base::send_buffer_size(4096));
  clientTcp_->socket().set_option(asio::socket_base::receive_buffer_size(4096));
  const std::string big(48 * 1024, 'b');
  std::optional<error_code> first, second;
  asio::co_spawn(
      io_,
      [&]() -> asio::awaitable<void> {
        auto [ec, n] = co_await server_->write(asio::buffer(big));
        first = ec;
      },
      asio::detached);
  io_.restart();
  io_.run_for(20ms);
  ASSERT_FALSE(first) << "the socket took the whole write at once: the test needs it to fill";
  asio::co_spawn(
      io_,
      [&]() -> asio::awaitable<void> {
        auto [ec, n] = co_await server_->write(asio::buffer(std::string_view("tail")));
        second = ec;
      },
      asio::detached);
  io_.restart();
  io_.run_for(20ms);
  ASSERT_FALSE(second) << "the second write did not wait for the send under way";
  std::pair<error_code, std::string> got;
  run([&]() -> asio::awaitable<void> { got = co_await readAll(*client_, big.size() + 4); });
  EXPECT_FALSE(got.first);
  ASSERT_EQ(got.second.size(), big.size() + 4);
  EXPECT_TRUE(got.second.compare(0, big.size(), big) == 0);
  EXPECT_EQ(got.second.substr(big.size()), "tail");
  run([&]() -> asio::awaitable<void> {
    while (!first || !second) co_await asio::post(io_, asio::use_awaitable);
  });
  EXPECT_FALSE(*first);
  EXPECT_FALSE(*second);
}

}  // namespace
}  // namespace sandgate::proxy
