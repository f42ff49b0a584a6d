// tls_load: the HTTPS load generator and upstream of bench/intercept_bench.py, in C++ so that
// the harness costs little next to the proxies it measures (the Python asyncio harness spends
// more CPU per request than sandgate does, and shares the same cores).
//
//   tls_load serve --cert F --key F --secret S [--close]
//       HTTPS on 127.0.0.1, an ephemeral port printed as the first line of stdout; a thread per
//       connection; every request gets a 13-byte 200 if its head carries
//       "Authorization: Bearer S" (any case), else a 401; --close: close after each response.
//   tls_load client --connect HOST:PORT --host NAME --cafile F --auth VALUE
//                   [--proxy-connect AUTHORITY] [--proxy-auth VALUE]
//                   [--mode keepalive|newconn] [--conns N] [--seconds S] [--pause-us U]
//       N threads, each with one connection (keepalive: made before the measured window; newconn:
//       CONNECT + handshake + one request + close, in a loop). With --proxy-connect, HOST:PORT is
//       a proxy and the client sends `CONNECT AUTHORITY` first. TLS verifies NAME against
//       --cafile. --pause-us: each connection sleeps U microseconds after every response (a
//       sparse load, as from an agent that thinks between calls). Prints one JSON object: n,
//       errors, elapsed, p50_us, p99_us, first_error.
//   tls_load relay --cert F --key F --upstream PORT --cafile F --host NAME --inject LINE
//                  [--spin-us U]
//       The floor for any intercepting proxy: the least one must do per request, with nothing
//       else. Listens like serve; answers a CONNECT with 200, terminates TLS with the given
//       certificate, opens one verified TLS connection (--cafile, --host as SNI and name) to
//       127.0.0.1:PORT, then relays records both ways, replacing the value of the client's
//       `Authorization` line with LINE's (as in "Authorization: Bearer S"). No HTTP parsing,
//       no policy, no audit, no pool: it assumes what the benchmark's client does (a request
//       head inside one record) and is not a proxy for anything else. Non-blocking sockets;
//       an idle connection polls without sleeping for U microseconds (default 100, as
//       sandgate's --idle-spin) before it waits in poll().
//
// Plain sockets (blocking, but for the relay) and OpenSSL, one thread per connection: simple,
// and cheap enough at the 64 connections the benchmark uses. Not a test, not part of sandgate.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kBody = "hello, world\n";

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tls_load: %s\n", what.c_str());
  std::exit(2);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string sslError() {
  char buf[256];
  unsigned long e = ERR_get_error();
  if (e == 0) return std::strerror(errno);
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

// "host:port" → sockaddr (IPv4 literal hosts only: everything here is on 127.0.0.1).
sockaddr_in parseAddress(const std::string& hp) {
  auto colon = hp.rfind(':');
  if (colon == std::string::npos) die("expected HOST:PORT, got " + hp);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(hp.substr(colon + 1))));
  if (::inet_pton(AF_INET, hp.substr(0, colon).c_str(), &sa.sin_addr) != 1) {
    die("not an IPv4 address: " + hp);
  }
  return sa;
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Reads through `readSome` until `buf` holds a full head; returns its length (with the blank
// line), or 0 on EOF/error.
template <class ReadSome>
size_t readHead(std::string& buf, ReadSome&& readSome) {
  while (true) {
    auto end = buf.find("\r\n\r\n");
    if (end != std::string::npos) return end + 4;
    if (buf.size() > 65536) return 0;
    char tmp[16384];
    long n = readSome(tmp, sizeof tmp);
    if (n <= 0) return 0;
    buf.append(tmp, static_cast<size_t>(n));
  }
}

// ---------------------------------------------------------------------------------------------
// serve

// A listening socket on 127.0.0.1, an ephemeral port, printed as the first line of stdout.
int listenLoopback() {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa = parseAddress("127.0.0.1:0");
  socklen_t len = sizeof sa;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(lfd, 4096) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    die(std::string("listening: ") + std::strerror(errno));
  }
  std::printf("%u\n", ntohs(sa.sin_port));
  std::fflush(stdout);
  return lfd;
}

// A server context with the certificate chain and key of the PEM files.
SSL_CTX* serverContext(const std::string& cert, const std::string& key) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
    die("loading the certificate: " + sslError());
  }
  return ctx;
}

// A client context that verifies its peer against the CA certificates of `cafile`.
SSL_CTX* clientContext(const std::string& cafile) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (SSL_CTX_load_verify_locations(ctx, cafile.c_str(), nullptr) != 1) {
    die("loading " + cafile + ": " + sslError());
  }
  return ctx;
}

// Accepts on `lfd` forever, a detached thread running `serveOne(fd)` per connection.
template <class F>
[[noreturn]] void acceptForever(int lfd, F serveOne) {
  while (true) {
    int fd = ::accept(lfd, nullptr, nullptr);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE) continue;
      die(std::string("accept: ") + std::strerror(errno));
    }
    std::thread(serveOne, fd).detach();
  }
}

struct ServeOptions {
  std::string cert, key, secret;
  bool close = false;
};

void serveConnection(SSL_CTX* ctx, int fd, const ServeOptions& o, const std::string& needle) {
  setNoDelay(fd);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  const std::string ok = std::string("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n") +
                         (o.close ? "Connection: close\r\n" : "") +
                         "Content-Length: " + std::to_string(kBody.size()) + "\r\n\r\n" +
                         std::string(kBody);
  const std::string denied = "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n";
  if (SSL_accept(ssl) == 1) {
    std::string buf;
    auto readSome = [&](char* p, size_t n) { return static_cast<long>(SSL_read(ssl, p, n)); };
    while (true) {
      size_t head = readHead(buf, readSome);
      if (head == 0) break;
      const bool authorized =
          (lower(std::string_view(buf).substr(0, head))).find(needle) != std::string::npos;
      buf.erase(0, head);  // requests carry no body here
      const std::string& out = authorized ? ok : denied;
      if (SSL_write(ssl, out.data(), static_cast<int>(out.size())) <= 0) break;
      if (o.close) break;
    }
    SSL_shutdown(ssl);
  }
  SSL_free(ssl);
  ::close(fd);
}

int serve(const ServeOptions& o) {
  SSL_CTX* ctx = serverContext(o.cert, o.key);
  const std::string needle = "\r\nauthorization: bearer " + lower(o.secret) + "\r\n";
  acceptForever(listenLoopback(), [&](int fd) { serveConnection(ctx, fd, o, needle); });
}

// ---------------------------------------------------------------------------------------------
// relay

struct RelayOptions {
  std::string cert, key, cafile, host, inject;
  uint16_t upstream = 0;
  std::chrono::microseconds spin{100};
};

// The client's `Authorization` value replaced by the injected one, in place in `data`.
void injectAuthorization(std::string& data, std::string_view name, std::string_view value) {
  const std::string low = lower(data);
  const std::string key = "\r\n" + lower(name) + ":";
  auto at = low.find(key);
  if (at == std::string::npos) return;
  const size_t from = at + key.size();
  const size_t to = data.find("\r\n", from);
  if (to == std::string::npos) return;
  data.replace(from, to - from, value);
}

// Waits until one of `fds` is readable: polls without sleeping for `spin`, then sleeps.
bool waitReadable(pollfd* fds, nfds_t n, std::chrono::microseconds spin) {
  const auto until = Clock::now() + spin;
  while (true) {
    const bool spinning = Clock::now() < until;
    int r = ::poll(fds, n, spinning ? 0 : -1);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

void relayConnection(SSL_CTX* serverCtx, SSL_CTX* clientCtx, int cfd, const RelayOptions& o) {
  setNoDelay(cfd);
  std::string head;
  auto rawRead = [&](char* p, size_t n) { return static_cast<long>(::recv(cfd, p, n, 0)); };
  const size_t connectLen = readHead(head, rawRead);
  int ufd = -1;
  SSL* client = nullptr;
  SSL* up = nullptr;
  const auto colon = o.inject.find(':');
  const std::string name = o.inject.substr(0, colon);
  std::string value(1, ' ');
  const size_t start = o.inject.find_first_not_of(' ', colon + 1);
  if (start != std::string::npos) value.append(o.inject, start);
  do {
    // The client sends nothing after its CONNECT until the answer: the head is all there is.
    if (connectLen == 0 || head.size() != connectLen) break;
    constexpr std::string_view ok = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (::send(cfd, ok.data(), ok.size(), MSG_NOSIGNAL) != static_cast<long>(ok.size())) break;
    client = SSL_new(serverCtx);
    SSL_set_fd(client, cfd);
    if (SSL_accept(client) != 1) break;
    ufd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to = parseAddress("127.0.0.1:" + std::to_string(o.upstream));
    if (::connect(ufd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) break;
    setNoDelay(ufd);
    up = SSL_new(clientCtx);
    SSL_set_fd(up, ufd);
    SSL_set_tlsext_host_name(up, o.host.c_str());
    SSL_set1_host(up, o.host.c_str());
    if (SSL_connect(up) != 1) break;
    // Both sockets non-blocking from here: a read that finds nothing returns to the poll.
    for (int fd : {cfd, ufd}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    pollfd fds[2] = {{cfd, POLLIN, 0}, {ufd, POLLIN, 0}};
    char tmp[16384];
    std::string data;
    bool open = true;
    while (open) {
      bool moved = false;
      for (int side = 0; side < 2 && open; ++side) {
        SSL* from = side == 0 ? client : up;
        SSL* into = side == 0 ? up : client;
        int n = SSL_read(from, tmp, sizeof tmp);
        if (n <= 0) {
          if (SSL_get_error(from, n) != SSL_ERROR_WANT_READ) open = false;
          ERR_clear_error();
          continue;
        }
        moved = true;
        data.assign(tmp, static_cast<size_t>(n));
        if (side == 0) injectAuthorization(data, name, value);
        // Blocking in effect: a small record into an empty socket buffer is written at once.
        size_t off = 0;
        while (off < data.size()) {
          int w = SSL_write(into, data.data() + off, static_cast<int>(data.size() - off));
          if (w > 0) {
            off += static_cast<size_t>(w);
            continue;
          }
          int e = SSL_get_error(into, w);
          ERR_clear_error();
          if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ) {
            open = false;
            break;
          }
          pollfd wfd{SSL_get_fd(into), POLLOUT, 0};
          ::poll(&wfd, 1, -1);
        }
      }
      if (open && !moved) open = waitReadable(fds, 2, o.spin);
    }
  } while (false);
  for (SSL* s : {client, up}) {
    if (s) SSL_free(s);
  }
  if (ufd >= 0) ::close(ufd);
  ::close(cfd);
}

int relay(const RelayOptions& o) {
  SSL_CTX* serverCtx = serverContext(o.cert, o.key);
  SSL_CTX* clientCtx = clientContext(o.cafile);
  SSL_CTX_set_min_proto_version(clientCtx, TLS1_2_VERSION);
  acceptForever(listenLoopback(), [&](int fd) { relayConnection(serverCtx, clientCtx, fd, o); });
}

// ---------------------------------------------------------------------------------------------
// client

struct ClientOptions {
  std::string connect, host, cafile, auth, proxyConnect, proxyAuth, mode = "keepalive";
  int conns = 1;
  double seconds = 5;
  std::chrono::microseconds pause{0};
};

// One TLS connection to the upstream, directly or through a CONNECT proxy.
class Connection {
 public:
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() { reset(); }

  // Connects, sends CONNECT when asked, handshakes. Returns an error text, empty on success.
  std::string open(SSL_CTX* ctx, const ClientOptions& o, const sockaddr_in& to) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
      return std::string("connect: ") + std::strerror(errno);
    }
    setNoDelay(fd_);
    if (!o.proxyConnect.empty()) {
      std::string req =
          "CONNECT " + o.proxyConnect + " HTTP/1.1\r\nHost: " + o.proxyConnect + "\r\n";
      if (!o.proxyAuth.empty()) req += "Proxy-Authorization: " + o.proxyAuth + "\r\n";
      req += "\r\n";
      if (::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<long>(req.size())) {
        return "CONNECT: send failed";
      }
      // Byte by byte: nothing of the TLS stream after the head may be swallowed here.
      std::string head;
      while (head.find("\r\n\r\n") == std::string::npos) {
        char c;
        if (::recv(fd_, &c, 1, 0) != 1 || head.size() > 8192) return "CONNECT: no answer";
        head.push_back(c);
      }
      if (head.compare(0, 12, "HTTP/1.1 200") != 0 && head.compare(0, 12, "HTTP/1.0 200") != 0) {
        return "CONNECT refused: " + head.substr(0, head.find('\r'));
      }
    }
    ssl_ = SSL_new(ctx);
    SSL_set_fd(ssl_, fd_);
    SSL_set_tlsext_host_name(ssl_, o.host.c_str());
    SSL_set1_host(ssl_, o.host.c_str());
    if (SSL_connect(ssl_) != 1) return "TLS handshake: " + sslError();
    return "";
  }

  // Sends `request` and reads one response; returns its status (0: failed).
  int exchange(const std::string& request) {
    if (SSL_write(ssl_, request.data(), static_cast<int>(request.size())) <= 0) return 0;
    auto readSome = [&](char* p, size_t n) { return static_cast<long>(SSL_read(ssl_, p, n)); };
    size_t head = readHead(buf_, readSome);
    if (head == 0 || buf_.size() < 12) return 0;
    const int status = std::atoi(buf_.c_str() + 9);
    const std::string h = lower(std::string_view(buf_).substr(0, head));
    buf_.erase(0, head);
    if (h.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
      while (true) {  // chunk-size line, data, CRLF; the last chunk and an empty trailer
        size_t eol;
        while ((eol = buf_.find("\r\n")) == std::string::npos) {
          if (!more(readSome)) return 0;
        }
        const size_t size = std::strtoul(buf_.c_str(), nullptr, 16);
        buf_.erase(0, eol + 2);
        if (!need(size + 2, readSome)) return 0;
        buf_.erase(0, size + 2);
        if (size == 0) break;
      }
    } else if (auto cl = h.find("\r\ncontent-length:"); cl != std::string::npos) {
      const size_t n = std::strtoul(h.c_str() + cl + 17, nullptr, 10);
      if (!need(n, readSome)) return 0;
      buf_.erase(0, n);
    }
    return status;
  }

  void reset() {
    if (ssl_) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
    ssl_ = nullptr;
    fd_ = -1;
    buf_.clear();
  }

 private:
  template <class ReadSome>
  bool more(ReadSome& readSome) {
    char tmp[16384];
    long n = readSome(tmp, sizeof tmp);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  template <class ReadSome>
  bool need(size_t n, ReadSome& readSome) {
    while (buf_.size() < n) {
      if (!more(readSome)) return false;
    }
    return true;
  }

  int fd_ = -1;
  SSL* ssl_ = nullptr;
  std::string buf_;
};

struct Results {
  std::mutex mu;
  std::vector<int64_t> latenciesNs;
  uint64_t errors = 0;
  std::string firstError;

  void add(const std::vector<int64_t>& lat, uint64_t errs, const std::string& first) {
    std::lock_guard lock(mu);
    latenciesNs.insert(latenciesNs.end(), lat.begin(), lat.end());
    errors += errs;
    if (firstError.empty()) firstError = first;
  }
};

std::string jsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

int client(const ClientOptions& o) {
  SSL_CTX* ctx = clientContext(o.cafile);
  const sockaddr_in to = parseAddress(o.connect);
  const bool newconn = o.mode == "newconn";
  const std::string request = "GET /v1/models HTTP/1.1\r\nHost: " + o.host +
                              "\r\nAuthorization: " + o.auth + "\r\n" +
                              (newconn ? "Connection: close\r\n" : "") + "\r\n";
  Results results;
  std::vector<Connection> conns(static_cast<size_t>(o.conns));
  if (!newconn) {  // handshakes happen before the measured window opens
    for (auto& c : conns) {
      if (auto e = c.open(ctx, o, to); !e.empty()) die("opening a connection: " + e);
    }
  }
  std::atomic<bool> stop{false};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (auto& conn : conns) {
    threads.emplace_back([&, c = &conn] {
      std::vector<int64_t> lat;
      lat.reserve(1 << 16);
      uint64_t errors = 0;
      std::string first;
      while (!stop.load(std::memory_order_relaxed)) {
        const auto start = Clock::now();
        int status = 0;
        if (newconn) {
          c->reset();
          if (auto e = c->open(ctx, o, to); !e.empty()) {
            ++errors;
            if (first.empty()) first = e;
            continue;
          }
        }
        status = c->exchange(request);
        if (status == 0) {
          ++errors;
          if (first.empty()) first = "connection lost";
          if (newconn) continue;
          break;  // a kept-alive connection is gone: no point going on with it
        }
        lat.push_back(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
        if (status != 200) {  // the upstream's 401: the secret did not arrive
          ++errors;
          if (first.empty()) first = "status " + std::to_string(status);
        }
        if (o.pause.count() > 0) std::this_thread::sleep_for(o.pause);
      }
      results.add(lat, errors, first);
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  auto& l = results.latenciesNs;
  std::sort(l.begin(), l.end());
  auto pct = [&](double p) {
    if (l.empty()) return 0.0;
    return static_cast<double>(l[std::min(l.size() - 1, static_cast<size_t>(l.size() * p))]) /
           1000.0;
  };
  std::printf(
      "{\"n\": %zu, \"errors\": %llu, \"elapsed\": %.4f, \"p50_us\": %.1f, \"p99_us\": %.1f, "
      "\"first_error\": %s}\n",
      l.size(), static_cast<unsigned long long>(results.errors), elapsed, pct(0.5), pct(0.99),
      jsonString(results.firstError).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: tls_load serve|client|relay [options] (see bench/tls_load.cc)");
  const std::string cmd = argv[1];
  std::map<std::string, std::string> opts;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) die("unexpected argument " + a);
    if (a == "--close") {
      opts[a] = "1";
    } else if (i + 1 < argc) {
      opts[a] = argv[++i];
    } else {
      die(a + " needs a value");
    }
  }
  auto get = [&](const std::string& k, std::string def = "") {
    auto it = opts.find(k);
    return it == opts.end() ? def : it->second;
  };
  ::signal(SIGPIPE, SIG_IGN);
  if (cmd == "serve") {
    ServeOptions o{get("--cert"), get("--key"), get("--secret"), opts.count("--close") > 0};
    if (o.cert.empty() || o.key.empty() || o.secret.empty())
      die("serve needs --cert --key --secret");
    return serve(o);
  }
  if (cmd == "relay") {
    RelayOptions o;
    o.cert = get("--cert");
    o.key = get("--key");
    o.cafile = get("--cafile");
    o.host = get("--host");
    o.inject = get("--inject");
    o.upstream = static_cast<uint16_t>(std::stoi(get("--upstream", "0")));
    o.spin = std::chrono::microseconds(std::stoll(get("--spin-us", "100")));
    if (o.cert.empty() || o.key.empty() || o.cafile.empty() || o.host.empty() ||
        o.inject.find(':') == std::string::npos || o.upstream == 0) {
      die("relay needs --cert --key --upstream --cafile --host --inject NAME:VALUE");
    }
    return relay(o);
  }
  if (cmd == "client") {
    ClientOptions o;
    o.connect = get("--connect");
    o.host = get("--host");
    o.cafile = get("--cafile");
    o.auth = get("--auth");
    o.proxyConnect = get("--proxy-connect");
    o.proxyAuth = get("--proxy-auth");
    o.mode = get("--mode", "keepalive");
    o.conns = std::stoi(get("--conns", "1"));
    o.seconds = std::stod(get("--seconds", "5"));
    o.pause = std::chrono::microseconds(std::stoll(get("--pause-us", "0")));
    if (o.connect.empty() || o.host.empty() || o.cafile.empty()) {
      die("client needs --connect --host --cafile");
    }
    return client(o);
  }
  die("unknown command " + cmd);
}
