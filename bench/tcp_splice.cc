// tcp_splice: the byte pipe between h2load and what bench/h2_bench.py measures (h2load cannot
// speak to a proxy). In C++ so that the pipe costs little next to the proxy it carries bytes
// to: the Python asyncio splice it replaces was the bottleneck of its own benchmark (a 64-stream
// run through it alone reached a tenth of direct h2 on a loaded machine).
//
//   tcp_splice --to HOST:PORT [--connect AUTHORITY --proxy-auth VALUE]
//       Listens on 127.0.0.1, an ephemeral port printed as the first line of stdout. Each
//       accepted connection gets a thread and a TCP connection to HOST:PORT (an IPv4 literal);
//       with --connect, `CONNECT AUTHORITY` (and `Proxy-Authorization: VALUE`) is sent first and
//       the connection is closed unless the answer is a 200. Then bytes are copied both ways
//       (poll, TCP_NODELAY on both sockets) until either side closes.
//
// Not a test, not part of sandgate.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tcp_splice: %s\n", what.c_str());
  std::exit(2);
}

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

bool sendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

struct Options {
  sockaddr_in to{};
  std::string connect, proxyAuth;
};

// Sends the CONNECT and reads its answer byte by byte (so that nothing after the head is taken
// from the tunnel): true on a 200.
bool connectThrough(int ufd, const Options& o) {
  std::string head = "CONNECT " + o.connect + " HTTP/1.1\r\nHost: " + o.connect + "\r\n";
  if (!o.proxyAuth.empty()) head += "Proxy-Authorization: " + o.proxyAuth + "\r\n";
  head += "\r\n";
  if (!sendAll(ufd, head.data(), head.size())) return false;
  std::string answer;
  while (answer.size() < 16384 && answer.find("\r\n\r\n") == std::string::npos) {
    char c;
    if (::recv(ufd, &c, 1, 0) != 1) return false;
    answer += c;
  }
  return answer.rfind("HTTP/1.1 200", 0) == 0;
}

void pipeConnection(int cfd, const Options& o) {
  int ufd = ::socket(AF_INET, SOCK_STREAM, 0);
  setNoDelay(cfd);
  setNoDelay(ufd);
  const bool ok = ::connect(ufd, reinterpret_cast<const sockaddr*>(&o.to), sizeof o.to) == 0 &&
                  (o.connect.empty() || connectThrough(ufd, o));
  if (ok) {
    pollfd fds[2] = {{cfd, POLLIN, 0}, {ufd, POLLIN, 0}};
    char buf[65536];
    bool open = true;
    while (open && ::poll(fds, 2, -1) > 0) {
      for (int i = 0; i < 2 && open; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, 0);
        open = n > 0 && sendAll(fds[1 - i].fd, buf, static_cast<size_t>(n));
      }
    }
  }
  ::close(ufd);
  ::close(cfd);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool haveTo = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--to") {
      o.to = parseAddress(v);
      haveTo = true;
    } else if (a == "--connect") {
      o.connect = v;
    } else if (a == "--proxy-auth") {
      o.proxyAuth = v;
    } else {
      die("unknown option " + a);
    }
  }
  if (!haveTo || argc % 2 == 0)
    die("usage: tcp_splice --to HOST:PORT [--connect A --proxy-auth V]");
  ::signal(SIGPIPE, SIG_IGN);
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
  while (true) {
    int fd = ::accept(lfd, nullptr, nullptr);
    if (fd < 0) continue;
    std::thread(pipeConnection, fd, o).detach();
  }
}
