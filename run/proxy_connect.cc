// `sandgate connect` (see proxy_connect.h): blocking sockets and poll(2); no Asio, the process
// does one thing and ends.
#include "run/proxy_connect.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

#include "common/encoding.h"
#include "common/terminal_text.h"

namespace sandgate::run {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kConnectTimeout = std::chrono::seconds(30);
constexpr auto kAnswerTimeout = std::chrono::seconds(60);

Diagnostic problem(std::string message) { return Diagnostic{"", 0, 0, "", std::move(message)}; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Waits for `events` on fd until `deadline`; false on timeout or error.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

bool writeAllFd(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// A connected TCP socket to the proxy (each resolved address in turn), or -1 with `error` set.
int dialProxy(const ProxyEndpoint& proxy, std::string* error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(proxy.host.c_str(), proxy.port.c_str(), &hints, &found); rc != 0) {
    *error = fmt::format("cannot resolve the proxy {}: {}", proxy.host, ::gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS && waitFor(fd, POLLOUT, Clock::now() + kConnectTimeout)) {
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    } else if (err == EINPROGRESS) {
      err = ETIMEDOUT;
    }
    if (err != 0) {
      *error = fmt::format("cannot connect to the proxy {}:{}: {}", proxy.host, proxy.port,
                           std::strerror(err));
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  }
  return fd;
}

// Reads the answer head one byte at a time: the first byte after the blank line is the
// tunnel's (the upstream's SSH banner may come in the same segment), so nothing past the head
// is taken from the socket. Bounded by kMaxAnswerHead and kAnswerTimeout.
std::optional<std::string> readHead(int fd, std::string* error) {
  std::string head;
  const auto deadline = Clock::now() + kAnswerTimeout;
  while (head.size() < kMaxAnswerHead) {
    if (!waitFor(fd, POLLIN, deadline)) {
      *error = "the proxy did not answer in time";
      return std::nullopt;
    }
    char c;
    ssize_t n = ::recv(fd, &c, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = n == 0 ? "the proxy closed the connection before its answer ended"
                      : fmt::format("reading the proxy's answer: {}", std::strerror(errno));
      return std::nullopt;
    }
    head.push_back(c);
    if (head.ends_with("\r\n\r\n") || head.ends_with("\n\n")) return head;
  }
  *error = fmt::format("the proxy's answer head is longer than {} bytes", kMaxAnswerHead);
  return std::nullopt;
}

// The detail of a refusal body ({"error": ..., "hint": ...}); empty when it has none.
std::string bodyDetail(std::string_view body) {
  boost::system::error_code ec;
  auto v = boost::json::parse(body, ec);
  if (ec || !v.is_object()) return {};
  std::string out;
  if (auto* e = v.as_object().if_contains("error"); e != nullptr && e->is_string()) {
    out = std::string(e->as_string());
  }
  if (auto* h = v.as_object().if_contains("hint"); h != nullptr && h->is_string()) {
    out += (out.empty() ? "" : " (") + std::string(h->as_string()) + (out.empty() ? "" : ")");
  }
  return out;
}

// Relays until both directions ended. A direction ends at EOF or an error of either side; its
// destination is then half-closed (shutdown for the socket, close for `out`), so that the
// other side sees the end while the other direction goes on.
void relay(int in, int out, int sock) {
  bool upOpen = true, downOpen = true;
  char buf[65536];
  while (upOpen || downOpen) {
    pollfd p[2] = {{upOpen ? in : -1, POLLIN, 0}, {downOpen ? sock : -1, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (upOpen && (p[0].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) {
      ssize_t n = ::read(in, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !writeAllFd(sock, buf, static_cast<size_t>(n))) {
        upOpen = false;
        ::shutdown(sock, SHUT_WR);
      }
    }
    if (downOpen && (p[1].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) {
      ssize_t n = ::recv(sock, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !writeAllFd(out, buf, static_cast<size_t>(n))) {
        downOpen = false;
        ::close(out);
      }
    }
  }
}

}  // namespace

Result<ProxyEndpoint> parseProxyUrl(std::string_view text) {
  auto url = boost::urls::parse_uri(text);
  if (!url) return problem(fmt::format("'{}' is not a URL", escapeText(text)));
  if (url->scheme() != "http") {
    return problem(
        fmt::format("'{}': only an http:// proxy URL can carry a CONNECT", escapeText(text)));
  }
  if (!url->has_authority() || url->encoded_host().empty()) {
    return problem(fmt::format("'{}' names no proxy host", escapeText(text)));
  }
  if (!(url->encoded_path().empty() || url->encoded_path() == "/") || url->has_query() ||
      url->has_fragment()) {
    return problem(fmt::format("'{}': a proxy URL has no path or query", escapeText(text)));
  }
  ProxyEndpoint p;
  p.host = url->host_type() == boost::urls::host_type::ipv6
               ? std::string(url->encoded_host_address())
               : std::string(url->host());
  if (!p.host.empty() && p.host.front() == '[') p.host = p.host.substr(1, p.host.size() - 2);
  p.port = url->has_port() && !url->port().empty() ? std::string(url->port()) : "3128";
  if (url->has_userinfo()) {
    // The task identity `sandgate serve` reads: Basic base64(task:token), decoded from the URL.
    std::string user = url->user();
    std::string password = url->password();
    p.authorization = "Basic " + base64Encode(user + ":" + password);
  }
  return p;
}

Result<ProxyEndpoint> proxyFromEnvironment(
    const std::map<std::string, std::string, std::less<>>& env) {
  for (const char* name : {"HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"}) {
    auto it = env.find(name);
    if (it == env.end() || it->second.empty()) continue;
    auto parsed = parseProxyUrl(it->second);
    if (!parsed) return problem(name + std::string(": ") + parsed.errors().front().message);
    return parsed;
  }
  return problem(
      "no proxy: set HTTPS_PROXY (or https_proxy, ALL_PROXY, all_proxy) to the http:// URL of "
      "sandgate's proxy (inside `sandgate run` it is set already)");
}

std::optional<ConnectAnswer> parseAnswerHead(std::string_view head) {
  auto eol = head.find('\n');
  if (eol == std::string_view::npos) return std::nullopt;
  std::string_view status = head.substr(0, eol);
  if (status.ends_with('\r')) status.remove_suffix(1);
  if (!(status.starts_with("HTTP/1.1 ") || status.starts_with("HTTP/1.0 ")) || status.size() < 12) {
    return std::nullopt;
  }
  ConnectAnswer answer;
  std::string_view code = status.substr(9, 3);
  auto [ptr, ec] = std::from_chars(code.data(), code.data() + 3, answer.status);
  if (ec != std::errc{} || ptr != code.data() + 3 || answer.status < 100 ||
      (status.size() > 12 && status[12] != ' ')) {
    return std::nullopt;
  }
  for (std::string_view rest = head.substr(eol + 1); !rest.empty();) {
    auto end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty()) break;
    auto colon = line.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    if (iequals(line.substr(0, colon), "X-Sandgate-Reason")) {
      answer.reason = std::string(trim(line.substr(colon + 1)));
    }
  }
  return answer;
}

std::string refusalMessage(std::string_view target, const ConnectAnswer& answer) {
  std::string msg = fmt::format("sandgate connect: {} refused by the proxy: {}", escapeText(target),
                                answer.status);
  if (!answer.reason.empty()) msg += " " + escapeText(answer.reason);
  if (!answer.detail.empty()) msg += ": " + escapeText(answer.detail);
  return msg;
}

int connectAndRelay(const std::string& host, const std::string& port,
                    const std::map<std::string, std::string, std::less<>>& env, int in, int out) {
  auto fail = [](const std::string& message, int status) {
    fmt::print(stderr, "sandgate connect: {}\n", message);
    return status;
  };
  unsigned portNumber = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), portNumber);
  if (ec != std::errc{} || ptr != port.data() + port.size() || portNumber == 0 ||
      portNumber > 65535) {
    return fail(fmt::format("'{}' is not a port", escapeText(port)), 2);
  }
  // A host with CR, LF, spaces or controls would forge the request's head.
  if (host.empty() || host.size() > 253 ||
      host.find_first_of(" \t\r\n/@?#\\") != std::string::npos ||
      std::any_of(host.begin(), host.end(), [](char c) { return c < 0x21 || c == 0x7f; })) {
    return fail(fmt::format("'{}' is not a host name or address", escapeText(host)), 2);
  }
  auto proxy = proxyFromEnvironment(env);
  if (!proxy) return fail(proxy.errors().front().message, 2);
  ::signal(SIGPIPE, SIG_IGN);
  std::string error;
  int sock = dialProxy(proxy.value(), &error);
  if (sock < 0) return fail(error, 1);
  const bool v6 = host.find(':') != std::string::npos;
  const std::string target = v6 ? fmt::format("[{}]:{}", host, port) : host + ":" + port;
  std::string request = fmt::format("CONNECT {} HTTP/1.1\r\nHost: {}\r\n", target, target);
  if (proxy->authorization) request += "Proxy-Authorization: " + *proxy->authorization + "\r\n";
  request += "\r\n";
  if (!writeAllFd(sock, request.data(), request.size())) {
    ::close(sock);
    return fail(fmt::format("sending the CONNECT: {}", std::strerror(errno)), 1);
  }
  auto head = readHead(sock, &error);
  if (!head) {
    ::close(sock);
    return fail(error, 1);
  }
  auto answer = parseAnswerHead(*head);
  if (!answer) {
    ::close(sock);
    return fail("the proxy's answer is not an HTTP/1.1 response head", 1);
  }
  if (answer->status != 200) {
    // The body says why; bounded, and read only until the deadline.
    std::string body;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    char buf[4096];
    while (body.size() < kMaxRefusalBody && waitFor(sock, POLLIN, deadline)) {
      ssize_t n = ::recv(sock, buf, std::min(sizeof buf, kMaxRefusalBody - body.size()), 0);
      if (n <= 0) break;
      body.append(buf, static_cast<size_t>(n));
    }
    ::close(sock);
    answer->detail = bodyDetail(body);
    fmt::print(stderr, "{}\n", refusalMessage(target, *answer));
    return 1;
  }
  relay(in, out, sock);
  ::close(sock);
  return 0;
}

}  // namespace sandgate::run
