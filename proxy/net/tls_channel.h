// One TLS connection of an intercepted tunnel (either leg), driven from the session's own
// coroutine. Internal to proxy/.
//
// OpenSSL works on memory BIOs; the channel moves bytes between them and the socket itself,
// with non-blocking recv/send, and waits (under the DeadlineStream's deadline) only when the
// socket has nothing to read or no room to write. A read or write that can finish at once
// finishes at once: nothing goes through Asio's queue, unlike a stack of composed operations
// (Beast's HTTP operations over its flat stream over Asio's TLS stream), each of which queues
// its completion when it finishes immediately.
//
// Errors are those the rest of proxy/ knows from Asio's TLS stream: asio::error::eof after a
// close_notify, asio::ssl::error::stream_truncated for a connection cut without one, OpenSSL's
// errors in asio's ssl category, beast::error::timeout past the deadline.
//
// One reader and one writer may use a channel at the same time (the WebSocket relay does).
#pragma once

#include <openssl/ssl.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <string>
#include <tuple>

#include "proxy/net/deadline_stream.h"

namespace sandgate::proxy {

class TlsChannel {
 public:
  enum class Role { kClient, kServer };

  // `tcp` must outlive the channel. `ctx` provides certificates, trust and callbacks.
  TlsChannel(DeadlineStream& tcp, SSL_CTX* ctx, Role role);
  ~TlsChannel();
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  SSL* native_handle() { return ssl_; }
  // For beast::get_lowest_layer(): deadlines are set on the TCP stream.
  DeadlineStream& next_layer() { return tcp_; }
  // False when the SSL object could not be made (out of memory).
  bool ok() const { return ssl_ != nullptr; }

  // Bytes of the TLS stream that were read before the channel existed (the start of a
  // ClientHello that arrived with the CONNECT head). False if they could not be stored.
  bool feed(boost::asio::const_buffer bytes);

  // asio::error::in_progress when a server context's ClientHello callback paused the handshake
  // (SSL_CLIENT_HELLO_RETRY): the caller does what the callback asked for, then calls again.
  boost::asio::awaitable<boost::system::error_code> handshake();
  // Decrypted bytes into `into`: at least one, or an error.
  boost::asio::awaitable<std::tuple<boost::system::error_code, size_t>> readSome(
      boost::asio::mutable_buffer into);
  // Encrypts and sends all of `bytes` (in records of up to 16 KiB); returns once they are on
  // the socket, or queued behind a send the other direction's reader is finishing.
  boost::asio::awaitable<std::tuple<boost::system::error_code, size_t>> write(
      boost::asio::const_buffer bytes);
  // Sends close_notify (does not wait for the peer's).
  boost::asio::awaitable<void> shutdown();

  // Nothing decrypted or received is waiting inside the channel (the socket itself is not
  // looked at).
  bool quiet() const;
  // Without waiting: has the peer sent application data nobody has read yet, or ended the
  // connection? Handshake messages after the handshake (TLS 1.3 session tickets) do not count.
  bool peerHasSpoken();
  // The first byte the peer sent (fed or received), or -1 before any: a TLS stream starts
  // with a handshake record (0x16), so anything else says the peer is not speaking TLS.
  int firstByte() const { return firstByte_; }

 private:
  // Moves what the socket has into in_ without waiting: true when it moved some, or when `ec`
  // says why none will come (an error; the peer's end, a truncation, since OpenSSL still wants
  // bytes); false when the socket has nothing yet.
  bool receive(boost::system::error_code& ec);
  // Receives at least one byte into in_ (waiting if need be).
  boost::asio::awaitable<boost::system::error_code> fill();
  // Sends everything OpenSSL has written (or waits for the flush under way and shares its
  // outcome).
  boost::asio::awaitable<boost::system::error_code> flush();
  // flush() when it can finish without waiting: true when it did (`ec` its outcome); false,
  // having sent what the socket took, when no flush may start or the socket is full.
  bool tryFlush(boost::system::error_code& ec);
  // Sends what OpenSSL has written until the socket is full: false then; true once all is
  // sent or on an error (in `ec`).
  bool sendPending(boost::system::error_code& ec);
  // Ends a flush with `ec` and wakes the writers waiting for it.
  void endFlush(boost::system::error_code ec);
  // The error for an SSL call that returned `ret`.
  boost::system::error_code sslError(int ret);

  DeadlineStream& tcp_;
  SSL* ssl_ = nullptr;
  BIO* in_ = nullptr;   // network bytes for OpenSSL to read
  BIO* out_ = nullptr;  // records OpenSSL wrote, to be sent
  std::string sent_;    // taken from out_ and being sent
  size_t sentOffset_ = 0;
  bool peerEof_ = false;
  int firstByte_ = -1;
  bool flushing_ = false;
  int flushWaiters_ = 0;                 // coroutines waiting in flush() for the flush under way
  boost::system::error_code lastFlush_;  // how the last flush ended
  boost::asio::steady_timer flushed_;    // cancelled when a flush ends: wakes a waiting writer
};

}  // namespace sandgate::proxy
