// TLS on memory BIOs, driven from the session's coroutine (see tls_channel.h).
#include "proxy/net/tls_channel.h"

#include <openssl/err.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <cerrno>
#include <climits>

#include "proxy/net/completion.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
using boost::system::error_code;
using Wait = asio::ip::tcp::socket::wait_type;

namespace {

constexpr size_t kRecord = 16 * 1024;         // the most plaintext one TLS record carries
constexpr size_t kFlushAt = 64 * 1024;        // a long write sends after this much
constexpr size_t kKeepOutBuffer = 64 * 1024;  // a bigger send buffer is freed once empty

// Empties the thread's OpenSSL error queue before a call whose failure SSL_get_error reads
// from it. It peeks first: ERR_clear_error walks all the queue's slots even when it is empty,
// some 840 instructions (OpenSSL 3.0), four times per proxied request. SSL_get_error itself
// looks only at what ERR_peek_error sees.
void clearErrors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

}  // namespace

TlsChannel::TlsChannel(DeadlineStream& tcp, SSL_CTX* ctx, Role role)
    : tcp_(tcp), flushed_(tcp.get_executor()) {
  flushed_.expires_at(asio::steady_timer::time_point::max());
  ssl_ = SSL_new(ctx);
  in_ = BIO_new(BIO_s_mem());
  out_ = BIO_new(BIO_s_mem());
  if (ssl_ == nullptr || in_ == nullptr || out_ == nullptr) {
    BIO_free(in_);
    BIO_free(out_);
    SSL_free(ssl_);
    ssl_ = nullptr;
    in_ = out_ = nullptr;
    return;
  }
  // An empty BIO means "nothing yet", never end of file: the socket says when the peer is done.
  BIO_set_mem_eof_return(in_, -1);
  BIO_set_mem_eof_return(out_, -1);
  SSL_set_bio(ssl_, in_, out_);  // owned by ssl_ from here
  if (role == Role::kServer) {
    SSL_set_accept_state(ssl_);
  } else {
    SSL_set_connect_state(ssl_);
  }
}

TlsChannel::~TlsChannel() { SSL_free(ssl_); }

bool TlsChannel::feed(asio::const_buffer bytes) {
  if (bytes.size() > 0 && firstByte_ < 0) {
    firstByte_ = *static_cast<const unsigned char*>(bytes.data());
  }
  return bytes.size() == 0 ||
         (in_ != nullptr && BIO_write(in_, bytes.data(), static_cast<int>(bytes.size())) ==
                                static_cast<int>(bytes.size()));
}

bool TlsChannel::quiet() const {
  return ssl_ != nullptr && SSL_has_pending(ssl_) == 0 && BIO_ctrl_pending(in_) == 0 &&
         BIO_ctrl_pending(out_) == 0 && sentOffset_ == sent_.size();
}

bool TlsChannel::peerHasSpoken() {
  if (ssl_ == nullptr) return false;
  error_code ec;
  while (receive(ec)) {
    if (ec) return true;  // the peer's end (or an error) is an answer too
  }
  // SSL_peek works on what the memory BIO holds and never waits: it consumes records that are
  // not data (session tickets) and stops at the first byte of data.
  char byte;
  const int n = SSL_peek(ssl_, &byte, 1);
  if (n > 0) return true;
  const int err = SSL_get_error(ssl_, n);
  ERR_clear_error();
  return err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE;
}

error_code TlsChannel::sslError(int ret) {
  const int err = SSL_get_error(ssl_, ret);
  if (err == SSL_ERROR_ZERO_RETURN) return asio::error::eof;
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e != 0) return error_code(static_cast<int>(e), asio::error::get_ssl_category());
  // No OpenSSL error queued: the records ended where they should not have.
  return asio::ssl::error::stream_truncated;
}

bool TlsChannel::receive(error_code& ec) {
  char buf[kRecord + 512];
  while (true) {
    ssize_t n = ::recv(tcp_.socket().native_handle(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      if (firstByte_ < 0) firstByte_ = static_cast<unsigned char>(buf[0]);
      if (BIO_write(in_, buf, static_cast<int>(n)) != n) ec = asio::error::no_memory;
      return true;
    }
    if (n == 0) {
      // The peer is done, but OpenSSL still wants bytes: the records end where they should not.
      peerEof_ = true;
      ec = asio::ssl::error::stream_truncated;
      return true;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    ec = tcp_.timedOut() ? error_code(boost::beast::error::timeout)
                         : error_code(errno, asio::error::get_system_category());
    return true;
  }
}

asio::awaitable<error_code> TlsChannel::fill() {
  error_code ec;
  while (!receive(ec)) {
    auto [wec] = co_await tcp_.async_wait(Wait::wait_read, kUse);
    if (wec) co_return wec;
  }
  co_return ec;
}

bool TlsChannel::sendPending(error_code& ec) {
  const int fd = tcp_.socket().native_handle();
  while (true) {
    if (sentOffset_ == sent_.size()) {
      sent_.clear();
      sentOffset_ = 0;
      const size_t pending = BIO_ctrl_pending(out_);
      if (pending == 0) return true;
      sent_.resize(pending);
      BIO_read(out_, sent_.data(), static_cast<int>(pending));
    }
    ssize_t n = ::send(fd, sent_.data() + sentOffset_, sent_.size() - sentOffset_,
                       MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sentOffset_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    ec = tcp_.timedOut() ? error_code(boost::beast::error::timeout)
                         : error_code(errno, asio::error::get_system_category());
    return true;
  }
}

void TlsChannel::endFlush(error_code ec) {
  if (sentOffset_ == sent_.size() && sent_.capacity() > kKeepOutBuffer) {
    std::string().swap(sent_);
    sentOffset_ = 0;
  }
  flushing_ = false;
  lastFlush_ = ec;
  if (flushWaiters_ > 0) flushed_.cancel();
}

bool TlsChannel::tryFlush(error_code& ec) {
  if (flushing_) return false;
  flushing_ = true;
  if (!sendPending(ec)) {
    flushing_ = false;  // flush() takes it from here, where this left off
    return false;
  }
  endFlush(ec);
  return true;
}

asio::awaitable<error_code> TlsChannel::flush() {
  if (flushing_) {
    // The other direction is sending, and its loop sends our records too (they are in out_
    // already, and it stops only once out_ is empty): wait for it and share its outcome.
    ++flushWaiters_;
    while (flushing_) {
      co_await flushed_.async_wait(kUse);  // ends when cancelled: that flush is over
    }
    --flushWaiters_;
    co_return lastFlush_;
  }
  flushing_ = true;
  error_code ec;
  while (!sendPending(ec)) {
    auto [wec] = co_await tcp_.async_wait(Wait::wait_write, kUse);
    if (wec) {
      ec = wec;
      break;
    }
  }
  endFlush(ec);
  co_return ec;
}

asio::awaitable<error_code> TlsChannel::handshake() {
  if (ssl_ == nullptr) co_return error_code(asio::error::no_memory);
  while (true) {
    clearErrors();
    const int r = SSL_do_handshake(ssl_);
    if (BIO_ctrl_pending(out_) > 0) {
      error_code fec = co_await flush();
      if (fec) co_return fec;
    }
    if (r == 1) co_return error_code{};
    const int err = SSL_get_error(ssl_, r);
    // The server's ClientHello callback paused the handshake (see handshake() in the header).
    if (err == SSL_ERROR_WANT_CLIENT_HELLO_CB) co_return error_code(asio::error::in_progress);
    if (err != SSL_ERROR_WANT_READ) co_return sslError(r);
    error_code ec = co_await fill();
    if (ec) co_return ec;
  }
}

asio::awaitable<std::tuple<error_code, size_t>> TlsChannel::readSome(asio::mutable_buffer into) {
  if (into.size() == 0) co_return std::tuple{error_code{}, size_t{0}};
  const int want = static_cast<int>(std::min<size_t>(into.size(), INT_MAX));
  // Nothing for OpenSSL to work on: SSL_read could only ask for more (a call that costs about a
  // microsecond, twice per proxied request). Wait for bytes first.
  bool needBytes = !SSL_has_pending(ssl_) && BIO_ctrl_pending(in_) == 0 && !peerEof_ &&
                   !(SSL_get_shutdown(ssl_) & SSL_RECEIVED_SHUTDOWN);
  while (true) {
    if (needBytes) {
      // fill(), here rather than in a coroutine of its own: a coroutine frame (an allocation)
      // and a resumption fewer, twice per proxied request.
      error_code ec;
      while (!receive(ec)) {
        auto [wec] = co_await tcp_.async_wait(Wait::wait_read, kUse);
        if (wec) {
          ec = wec;
          break;
        }
      }
      if (ec) co_return std::tuple{ec, size_t{0}};
    }
    clearErrors();
    const int r = SSL_read(ssl_, into.data(), want);
    // Whatever reading made OpenSSL write (an alert, a key update's answer) goes out now,
    // unless the writer is sending already: then its loop takes it.
    if (BIO_ctrl_pending(out_) > 0 && !flushing_) {
      error_code fec;
      if (!tryFlush(fec)) fec = co_await flush();
      if (fec && r <= 0) co_return std::tuple{fec, size_t{0}};
    }
    if (r > 0) co_return std::tuple{error_code{}, static_cast<size_t>(r)};
    if (SSL_get_error(ssl_, r) != SSL_ERROR_WANT_READ) co_return std::tuple{sslError(r), size_t{0}};
    needBytes = true;
  }
}

asio::awaitable<std::tuple<error_code, size_t>> TlsChannel::write(asio::const_buffer bytes) {
  const char* p = static_cast<const char*>(bytes.data());
  size_t done = 0;
  while (done < bytes.size()) {
    const int chunk = static_cast<int>(std::min(bytes.size() - done, kRecord));
    clearErrors();
    const int r = SSL_write(ssl_, p + done, chunk);
    // On memory BIOs a write never waits for the socket. It may ask to read first (a TLS 1.2
    // renegotiation the peer started): not supported, the connection ends.
    if (r <= 0) co_return std::tuple{sslError(r), done};
    done += static_cast<size_t>(r);
    if (done == bytes.size() || BIO_ctrl_pending(out_) >= kFlushAt) {
      // Most sends finish at once: then without flush()'s coroutine frame.
      error_code ec;
      if (!tryFlush(ec)) ec = co_await flush();
      if (ec) co_return std::tuple{ec, done};
    }
  }
  co_return std::tuple{error_code{}, done};
}

asio::awaitable<void> TlsChannel::shutdown() {
  if (ssl_ == nullptr) co_return;
  clearErrors();
  SSL_shutdown(ssl_);
  clearErrors();
  co_await flush();
}

}  // namespace sandgate::proxy
