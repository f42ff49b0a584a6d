// The other ends of the proxy's data path in its in-process tests: a Wire (one blocking
// loopback connection, plain or TLS, every read and write bounded by a socket timeout, every
// byte it read recorded) and a TestUpstream (a loopback server on port 0 whose connections each
// run a script: answer, answer early, cut a body, send a malformed head, stall), with the HTTP
// reading both sides need. Everything here is synchronous on purpose: a test states what each
// side does in order, and the proxy under test is the only asynchronous party.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/unit/proxy/test_server.h"

namespace sandgate::proxy {

using namespace std::chrono_literals;

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;

// One connected socket. Reads go through an internal buffer (`buffered()`), so that a parser can
// take what it needs and leave the rest (a pipelined response, the body after a head). Not
// thread-safe except for unblock(), received() and ended(), which another thread may call.
class Wire {
 public:
  explicit Wire(int fd, std::chrono::milliseconds timeout = 5s) : fd_(fd) {
    setTimeout(timeout);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~Wire() { close(); }
  Wire(const Wire&) = delete;
  Wire& operator=(const Wire&) = delete;

  // The bound on every single read and write from now on.
  void setTimeout(std::chrono::milliseconds t) {
    timeval tv{static_cast<time_t>(t.count() / 1000),
               static_cast<suseconds_t>(t.count() % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }

  bool send(std::string_view bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      if (ssl_) {
        size_t n = 0;
        if (SSL_write_ex(ssl_, bytes.data() + off, bytes.size() - off, &n) != 1) return false;
        off += n;
        continue;
      }
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // Sends `bytes` `piece` bytes at a time, each in its own segment (TCP_NODELAY) or TLS record,
  // with a pause after each so that the proxy reads them apart: the edge case, not a wait.
  bool sendInPieces(std::string_view bytes, size_t piece) {
    for (size_t off = 0; off < bytes.size(); off += piece) {
      if (!send(bytes.substr(off, piece))) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }

  // One read appended to buffered(): the bytes read; 0 when the peer has ended the stream (EOF,
  // reset, a TLS close_notify or truncation: see endedBy()); -1 on timeout.
  long fill(size_t max = 64 * 1024) {
    if (ended_) return 0;
    std::vector<char> buf(max);
    long n = 0;
    if (ssl_) {
      size_t got = 0;
      ERR_clear_error();
      int rc = SSL_read_ex(ssl_, buf.data(), buf.size(), &got);
      if (rc == 1) {
        n = static_cast<long>(got);
      } else {
        const int e = SSL_get_error(ssl_, rc);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ||
            (e == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK))) {
          return -1;
        }
        markEnded(e == SSL_ERROR_ZERO_RETURN ? "close_notify" : "tls cut");
        return 0;
      }
    } else {
      ssize_t r;
      do {
        r = ::recv(fd_, buf.data(), buf.size(), 0);
      } while (r < 0 && errno == EINTR);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return -1;
      if (r <= 0) {
        markEnded(r == 0 ? "eof" : "reset");
        return 0;
      }
      n = r;
    }
    buffered_.append(buf.data(), static_cast<size_t>(n));
    std::lock_guard lock(mu_);
    received_.append(buf.data(), static_cast<size_t>(n));
    return n;
  }

  std::string& buffered() { return buffered_; }

  // Reads until buffered() holds `marker`; returns everything up to and including it (the rest
  // stays buffered). nullopt at the end of the stream, on timeout or beyond `limit` bytes.
  std::optional<std::string> readUntil(std::string_view marker, size_t limit = 1 << 20) {
    while (buffered_.find(marker) == std::string::npos) {
      if (buffered_.size() > limit || fill() <= 0) return std::nullopt;
    }
    const size_t end = buffered_.find(marker) + marker.size();
    std::string out = buffered_.substr(0, end);
    buffered_.erase(0, end);
    return out;
  }

  // Exactly `n` bytes (fewer: nullopt, and what came stays buffered).
  std::optional<std::string> readExactly(size_t n) {
    while (buffered_.size() < n) {
      if (fill() <= 0) return std::nullopt;
    }
    std::string out = buffered_.substr(0, n);
    buffered_.erase(0, n);
    return out;
  }

  // Everything until the peer ends the stream: true when it did, false on timeout or beyond
  // `limit` bytes. `into` gets what was read either way.
  bool readToEnd(std::string& into, size_t limit = 64u << 20) {
    long n;
    while ((n = fill()) > 0) {
      if (buffered_.size() > limit) break;
    }
    into += buffered_;
    buffered_.clear();
    return n == 0;
  }

  // Starts TLS over this connection (nothing may be buffered yet).
  bool startTlsServer(SSL_CTX* ctx) {
    if (!buffered_.empty() || !(ssl_ = SSL_new(ctx))) return false;
    SSL_set_fd(ssl_, fd_);
    return SSL_accept(ssl_) == 1;
  }
  // `sni` empty: no server name sent. `verifyHost` empty: the chain alone is verified.
  bool startTlsClient(SSL_CTX* ctx, const std::string& sni, const std::string& verifyHost) {
    if (!buffered_.empty() || !(ssl_ = SSL_new(ctx))) return false;
    SSL_set_fd(ssl_, fd_);
    SSL_set_verify(ssl_, SSL_VERIFY_PEER, nullptr);
    if (!sni.empty()) SSL_set_tlsext_host_name(ssl_, sni.c_str());
    if (!verifyHost.empty())
      X509_VERIFY_PARAM_set1_host(SSL_get0_param(ssl_), verifyHost.c_str(), 0);
    return SSL_connect(ssl_) == 1;
  }
  bool tls() const { return ssl_ != nullptr; }

  // Ends our sending side: a TCP half-close (after a close_notify, with TLS).
  void shutdownWrite() {
    if (ssl_) SSL_shutdown(ssl_);
    ::shutdown(fd_, SHUT_WR);
  }
  // A close the peer sees as a reset (RST), not an end of stream.
  void abort() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close();
  }
  void close() {
    std::lock_guard lock(mu_);
    if (ssl_) SSL_free(ssl_);
    ssl_ = nullptr;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // From another thread: wakes a read blocked on this connection (it then sees the end).
  void unblock() {
    std::lock_guard lock(mu_);
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }

  // Every byte read from the peer so far (decrypted, with TLS).
  std::string received() const {
    std::lock_guard lock(mu_);
    return received_;
  }
  // Whether the peer has ended the stream, and how ("eof", "reset", "close_notify", "tls cut").
  bool ended() const {
    std::lock_guard lock(mu_);
    return ended_;
  }
  std::string endedBy() const {
    std::lock_guard lock(mu_);
    return endedBy_;
  }

 private:
  void markEnded(const char* how) {
    std::lock_guard lock(mu_);
    ended_ = true;
    endedBy_ = how;
  }

  int fd_;
  SSL* ssl_ = nullptr;
  std::string buffered_;
  mutable std::mutex mu_;
  std::string received_;
  bool ended_ = false;
  std::string endedBy_;
};

// One side tells a script on an upstream thread that something has happened (bounded wait).
class Signal {
 public:
  void set() {
    std::lock_guard lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::milliseconds timeout = 3s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

// A client connection to 127.0.0.1:port (null when it cannot connect).
inline std::unique_ptr<Wire> dialLoopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(port);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (fd >= 0) ::close(fd);
    return nullptr;
  }
  return std::make_unique<Wire>(fd);
}

// One HTTP request as the upstream read it: the head (through the blank line) and its
// Content-Length body.
struct ReceivedRequest {
  std::string head;
  std::string body;
};

// The value of the first field `name` in `head` (case-insensitive), or nullopt.
inline std::optional<std::string> headerValue(std::string_view head, std::string_view name) {
  size_t pos = head.find("\r\n");
  while (pos != std::string_view::npos && pos + 2 < head.size()) {
    const size_t start = pos + 2;
    const size_t end = head.find("\r\n", start);
    const std::string_view line = head.substr(start, end - start);
    const size_t colon = line.find(':');
    if (colon == name.size() && boost::beast::iequals(line.substr(0, colon), name)) {
      std::string_view v = line.substr(colon + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      return std::string(v);
    }
    pos = end;
  }
  return std::nullopt;
}

// Reads one request with a Content-Length body (or none). nullopt when the stream ends or stalls
// first; a body cut short leaves what came in conn.buffered().
inline std::optional<ReceivedRequest> readRequest(Wire& conn) {
  auto head = conn.readUntil("\r\n\r\n", 64 * 1024);
  if (!head) return std::nullopt;
  ReceivedRequest r{*head, {}};
  if (auto cl = headerValue(r.head, "Content-Length")) {
    auto body = conn.readExactly(std::stoul(*cl));
    if (!body) return std::nullopt;
    r.body = *body;
  }
  return r;
}

inline std::string okResponse(std::string_view body, std::string_view extraFields = {}) {
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         std::string(extraFields) + "\r\n" + std::string(body);
}

// A response as a client read it through the proxy, parsed by Beast. `complete`: the message
// ended as its framing says (Content-Length reached, the last chunk, or EOF for a body that
// ends with the connection); a cut response is never complete.
struct ClientResponse {
  bool complete = false;
  bool headDone = false;
  int status = 0;
  boost::beast::http::fields fields;
  std::string body;
  std::string error;

  std::string field(std::string_view name) const {
    auto it = fields.find(name);
    return it == fields.end() ? std::string() : std::string(it->value());
  }
};

// Reads one response (a bounded number of reads, each under the Wire's timeout). Bytes past it
// stay buffered for the next.
inline ClientResponse readResponse(Wire& w, bool headRequest = false) {
  namespace http = boost::beast::http;
  http::response_parser<http::string_body> p;
  p.body_limit(64u << 20);
  p.header_limit(64 * 1024);
  p.eager(true);
  if (headRequest) p.skip(true);
  ClientResponse out;
  auto& buf = w.buffered();
  for (int reads = 0; reads < 100000; ++reads) {
    if (!buf.empty()) {
      boost::beast::error_code ec;
      const size_t used = p.put(boost::asio::buffer(buf), ec);
      buf.erase(0, used);
      if (ec == http::error::need_more) {
        ec = {};
      } else if (ec) {
        out.error = ec.message();
        break;
      } else if (p.is_done()) {
        out.complete = true;
        break;
      } else if (used > 0) {
        continue;  // what is left may parse further before anything more is read
      }
    }
    const long n = w.fill();
    if (n == 0) {
      boost::beast::error_code ec;
      p.put_eof(ec);
      out.complete = !ec && p.is_done();
      if (ec) out.error = ec.message();
      break;
    }
    if (n < 0) {
      out.error = "timeout";
      break;
    }
  }
  out.headDone = p.is_header_done();
  if (out.headDone) {
    out.status = p.get().result_int();
    for (const auto& f : p.get()) out.fields.insert(f.name_string(), f.value());
  }
  out.body = p.get().body();
  return out;
}

// A loopback upstream on an ephemeral port. Each accepted connection runs `script` on a thread
// of its own (over TLS when a server context is given; a failed handshake runs no script), and
// is closed when the script returns. Everything each connection received is kept. At most 64
// connections; the destructor wakes and joins every script.
class TestUpstream {
 public:
  using Script = std::function<void(Wire& conn, size_t index)>;

  explicit TestUpstream(Script script, SSL_CTX* tls = nullptr)
      : script_(std::move(script)), tls_(tls) {
    if (tls_) SSL_CTX_up_ref(tls_);
    listenFd_ = listenLoopback(&port_);
    if (listenFd_ >= 0) acceptor_ = std::thread([this] { acceptLoop(); });
  }
  ~TestUpstream() {
    stopping_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      for (auto& c : conns_) c->wire->unblock();
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
    if (listenFd_ >= 0) ::close(listenFd_);
    if (tls_) SSL_CTX_free(tls_);
  }
  TestUpstream(const TestUpstream&) = delete;
  TestUpstream& operator=(const TestUpstream&) = delete;

  bool ok() const { return listenFd_ >= 0; }
  uint16_t port() const { return port_; }

  size_t accepts() const {
    std::lock_guard lock(mu_);
    return conns_.size();
  }
  std::string received(size_t i) const {
    std::lock_guard lock(mu_);
    return i < conns_.size() ? conns_[i]->wire->received() : std::string();
  }
  // Connection i saw the proxy end it (EOF, reset or a TLS close).
  bool ended(size_t i) const {
    std::lock_guard lock(mu_);
    return i < conns_.size() && conns_[i]->wire->ended();
  }
  // How it ended ("eof", "reset", "close_notify", "tls cut"; empty while open).
  std::string endedBy(size_t i) const {
    std::lock_guard lock(mu_);
    return i < conns_.size() ? conns_[i]->wire->endedBy() : std::string();
  }
  bool handshakeFailed(size_t i) const {
    std::lock_guard lock(mu_);
    return i < conns_.size() && conns_[i]->handshakeFailed;
  }

  // Waits (at most `timeout`) until `n` connections were accepted.
  bool waitAccepts(size_t n, std::chrono::milliseconds timeout = 3s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return conns_.size() >= n; });
  }
  // Waits (at most `timeout`) until connection i's script has returned.
  bool waitDone(size_t i, std::chrono::milliseconds timeout = 3s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return i < conns_.size() && conns_[i]->done; });
  }
  // Returns once the accept loop has looked at the listening socket twice since the call, so
  // that a connection the proxy made before it has been counted by accepts().
  void settle() {
    std::unique_lock lock(mu_);
    const uint64_t start = polls_;
    cv_.wait_for(lock, 2s, [&] { return polls_ >= start + 2; });
  }

 private:
  struct Conn {
    std::unique_ptr<Wire> wire;
    bool done = false;
    bool handshakeFailed = false;
  };

  void acceptLoop() {
    while (!stopping_) {
      pollfd p{listenFd_, POLLIN, 0};
      const int r = ::poll(&p, 1, 20);
      if (r > 0 && (p.revents & POLLIN)) {
        const int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) start(fd);
      }
      std::lock_guard lock(mu_);
      ++polls_;
      cv_.notify_all();
    }
  }

  void start(int fd) {
    std::lock_guard lock(mu_);
    if (conns_.size() >= kMaxConnections) {
      ::close(fd);
      return;
    }
    const size_t index = conns_.size();
    conns_.push_back(std::make_shared<Conn>());
    auto conn = conns_.back();
    conn->wire = std::make_unique<Wire>(fd);
    threads_.emplace_back([this, conn, index] {
      if (tls_ && !conn->wire->startTlsServer(tls_)) {
        conn->handshakeFailed = true;
      } else {
        script_(*conn->wire, index);
      }
      conn->wire->close();
      std::lock_guard l(mu_);
      conn->done = true;
      cv_.notify_all();
    });
    cv_.notify_all();
  }

  static constexpr size_t kMaxConnections = 64;
  Script script_;
  SSL_CTX* tls_;
  int listenFd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Conn>> conns_;
  std::vector<std::thread> threads_;
  uint64_t polls_ = 0;
};

// Scripts.

// Answers each request on the connection with 200 and `body`, keeping it open (at most 16).
inline TestUpstream::Script answerEach(std::string body) {
  return [body](Wire& c, size_t) {
    for (int i = 0; i < 16; ++i) {
      if (!readRequest(c) || !c.send(okResponse(body))) return;
    }
  };
}

// Reads until the proxy ends the connection (or the Wire's timeout passes with nothing read).
inline void waitForEnd(Wire& c) {
  std::string ignored;
  c.readToEnd(ignored);
}

}  // namespace sandgate::proxy
