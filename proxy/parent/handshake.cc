// HTTP CONNECT and SOCKS5 handshakes with a parent proxy (see handshake.h).
#include "proxy/parent/handshake.h"

#include <fmt/format.h>

#include <array>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "proxy/net/completion.h"

namespace sandgate::proxy::parent {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using boost::system::error_code;

namespace {

HandshakeResult broken(std::string detail) {
  return HandshakeResult{HandshakeOutcome::kBroken, 0, std::move(detail)};
}

// Each operation races the deadline; a lost race is a timeout (the operation is cancelled).
asio::awaitable<error_code> writeAll(tcp::socket& s, asio::steady_timer& deadline,
                                     asio::const_buffer b) {
  auto r = co_await (asio::async_write(s, b, kUse) || deadline.async_wait(kUse));
  if (r.index() == 1) co_return asio::error::timed_out;
  co_return std::get<0>(std::get<0>(r));
}

asio::awaitable<error_code> readExact(tcp::socket& s, asio::steady_timer& deadline,
                                      asio::mutable_buffer b) {
  auto r = co_await (asio::async_read(s, b, kUse) || deadline.async_wait(kUse));
  if (r.index() == 1) co_return asio::error::timed_out;
  co_return std::get<0>(std::get<0>(r));
}

std::string ioDetail(std::string_view what, const error_code& ec) {
  if (ec == asio::error::timed_out) return fmt::format("the parent did not {} in time", what);
  if (ec == asio::error::eof) return fmt::format("the parent closed the connection ({})", what);
  return fmt::format("the parent connection failed ({}): {}", what, ec.message());
}

}  // namespace

std::optional<int> parseStatusLine(std::string_view head) {
  // "HTTP/1.1 200" and then SP or the line end: nothing looser, a parent that cannot say this
  // much is not one sandgate relies on.
  if (head.size() < 12) return std::nullopt;
  if (head.substr(0, 5) != "HTTP/" || head[5] != '1' || head[6] != '.' ||
      (head[7] != '0' && head[7] != '1') || head[8] != ' ') {
    return std::nullopt;
  }
  int status = 0;
  for (int i = 9; i < 12; ++i) {
    if (head[i] < '0' || head[i] > '9') return std::nullopt;
    status = status * 10 + (head[i] - '0');
  }
  if (status < 100) return std::nullopt;
  if (head.size() > 12 && head[12] != ' ' && head[12] != '\r') return std::nullopt;
  return status;
}

std::string connectRequest(const TunnelTarget& target, std::string_view proxyAuthorization) {
  const std::string authority = target.isAddress && target.v6
                                    ? fmt::format("[{}]:{}", target.host, target.port)
                                    : fmt::format("{}:{}", target.host, target.port);
  std::string out = fmt::format("CONNECT {} HTTP/1.1\r\nHost: {}\r\n", authority, authority);
  if (!proxyAuthorization.empty()) {
    out += "Proxy-Authorization: ";
    out += proxyAuthorization;
    out += "\r\n";
  }
  out += "\r\n";
  return out;
}

asio::awaitable<HandshakeResult> httpConnect(tcp::socket& s, asio::steady_timer& deadline,
                                             const TunnelTarget& target,
                                             std::string_view proxyAuthorization) {
  std::string request = connectRequest(target, proxyAuthorization);
  auto ec = co_await writeAll(s, deadline, asio::buffer(request));
  // The request held the parent's credential: wipe it before anything else can run.
  std::fill(request.begin(), request.end(), '\0');
  if (ec) co_return broken(ioDetail("take the CONNECT", ec));

  // Read the head and not one byte more: peek at what has arrived, consume up to the blank
  // line. Bytes after it are the upstream's (a server that speaks first), not the parent's.
  std::string head;
  std::array<char, 4096> buf;
  size_t end = std::string::npos;
  while (end == std::string::npos) {
    auto r = co_await (s.async_receive(asio::buffer(buf), tcp::socket::message_peek, kUse) ||
                       deadline.async_wait(kUse));
    if (r.index() == 1) co_return broken(ioDetail("answer the CONNECT", asio::error::timed_out));
    auto [rec, n] = std::get<0>(r);
    if (rec) co_return broken(ioDetail("answer the CONNECT", rec));
    if (n == 0) co_return broken(ioDetail("answer the CONNECT", asio::error::eof));
    const size_t from = head.size() >= 3 ? head.size() - 3 : 0;
    const size_t before = head.size();
    head.append(buf.data(), n);
    end = head.find("\r\n\r\n", from);
    size_t take = n;
    if (end != std::string::npos) {
      take = end + 4 - before;
      head.resize(end + 4);
    }
    if (head.size() > kMaxParentHead) {
      co_return broken(
          fmt::format("the parent's answer to CONNECT is over {} bytes", kMaxParentHead));
    }
    std::array<char, 4096> sink;
    if (auto e = co_await readExact(s, deadline, asio::buffer(sink.data(), take))) {
      co_return broken(ioDetail("answer the CONNECT", e));
    }
  }
  auto status = parseStatusLine(head);
  if (!status) co_return broken("the parent's answer to CONNECT is not an HTTP status line");
  if (*status >= 200 && *status < 300)
    co_return HandshakeResult{HandshakeOutcome::kOk, *status, {}};
  // The parent's reason phrase and body are its own words: only the status is repeated.
  if (*status == 407) {
    co_return HandshakeResult{
        HandshakeOutcome::kAuthFailed, *status,
        proxyAuthorization.empty()
            ? "the parent asks for proxy authentication (407) and no credential is configured"
            : "the parent refused the configured credential (407)"};
  }
  if (*status < 200) {
    co_return broken(fmt::format("the parent answered CONNECT with {}", *status));
  }
  co_return HandshakeResult{HandshakeOutcome::kRefused, *status,
                            fmt::format("the parent answered CONNECT with {}", *status)};
}

std::optional<std::vector<uint8_t>> socks5Request(const TunnelTarget& target) {
  std::vector<uint8_t> out = {0x05, 0x01, 0x00};
  if (target.isAddress) {
    if (target.addressBytes.size() != (target.v6 ? 16u : 4u)) return std::nullopt;
    out.push_back(target.v6 ? 0x04 : 0x01);
    out.insert(out.end(), target.addressBytes.begin(), target.addressBytes.end());
  } else {
    if (target.host.empty() || target.host.size() > 255) return std::nullopt;
    out.push_back(0x03);
    out.push_back(static_cast<uint8_t>(target.host.size()));
    out.insert(out.end(), target.host.begin(), target.host.end());
  }
  out.push_back(static_cast<uint8_t>(target.port >> 8));
  out.push_back(static_cast<uint8_t>(target.port & 0xff));
  return out;
}

namespace {

std::string_view socksReplyText(uint8_t code) {
  switch (code) {
    case 1:
      return "general failure";
    case 2:
      return "not allowed by its ruleset";
    case 3:
      return "network unreachable";
    case 4:
      return "host unreachable";
    case 5:
      return "connection refused";
    case 6:
      return "TTL expired";
    case 7:
      return "command not supported";
    case 8:
      return "address type not supported";
    default:
      return "an unassigned code";
  }
}

}  // namespace

asio::awaitable<HandshakeResult> socks5Connect(tcp::socket& s, asio::steady_timer& deadline,
                                               const TunnelTarget& target,
                                               std::optional<std::string_view> user,
                                               std::string_view password) {
  auto request = socks5Request(target);
  if (!request) co_return broken("the target cannot be named in a SOCKS5 request");
  // Offer exactly one method: with a credential, only user/password, so that a parent cannot
  // make sandgate skip the authentication its operator configured.
  const std::array<uint8_t, 3> greeting = {0x05, 0x01, static_cast<uint8_t>(user ? 0x02 : 0x00)};
  if (auto ec = co_await writeAll(s, deadline, asio::buffer(greeting))) {
    co_return broken(ioDetail("take the SOCKS5 greeting", ec));
  }
  std::array<uint8_t, 2> choice{};
  if (auto ec = co_await readExact(s, deadline, asio::buffer(choice))) {
    co_return broken(ioDetail("answer the SOCKS5 greeting", ec));
  }
  if (choice[0] != 0x05) co_return broken("the parent does not speak SOCKS5");
  if (choice[1] == 0xff) {
    co_return HandshakeResult{HandshakeOutcome::kAuthFailed, 0xff,
                              user ? "the SOCKS5 parent does not accept user/password"
                                   : "the SOCKS5 parent requires authentication and no "
                                     "credential is configured"};
  }
  if (choice[1] != greeting[2]) co_return broken("the SOCKS5 parent chose a method not offered");
  if (user) {
    if (user->empty() || user->size() > 255 || password.empty() || password.size() > 255) {
      co_return HandshakeResult{HandshakeOutcome::kAuthFailed, 0,
                                "the credential is not user:password with 1 to 255 bytes each"};
    }
    std::vector<uint8_t> auth;
    auth.push_back(0x01);
    auth.push_back(static_cast<uint8_t>(user->size()));
    auth.insert(auth.end(), user->begin(), user->end());
    auth.push_back(static_cast<uint8_t>(password.size()));
    auth.insert(auth.end(), password.begin(), password.end());
    auto ec = co_await writeAll(s, deadline, asio::buffer(auth));
    std::fill(auth.begin(), auth.end(), 0);  // held the password
    if (ec) co_return broken(ioDetail("take the SOCKS5 authentication", ec));
    std::array<uint8_t, 2> verdict{};
    if (auto e = co_await readExact(s, deadline, asio::buffer(verdict))) {
      co_return broken(ioDetail("answer the SOCKS5 authentication", e));
    }
    if (verdict[0] != 0x01) co_return broken("a malformed SOCKS5 authentication reply");
    if (verdict[1] != 0x00) {
      co_return HandshakeResult{HandshakeOutcome::kAuthFailed, verdict[1],
                                "the SOCKS5 parent refused the configured credential"};
    }
  }
  if (auto ec = co_await writeAll(s, deadline, asio::buffer(*request))) {
    co_return broken(ioDetail("take the SOCKS5 request", ec));
  }
  std::array<uint8_t, 4> reply{};
  if (auto ec = co_await readExact(s, deadline, asio::buffer(reply))) {
    co_return broken(ioDetail("answer the SOCKS5 request", ec));
  }
  if (reply[0] != 0x05 || reply[2] != 0x00) co_return broken("a malformed SOCKS5 reply");
  // Consume the bound address exactly, so the stream handed on starts with the upstream.
  size_t rest = 0;
  if (reply[3] == 0x01) {
    rest = 4 + 2;
  } else if (reply[3] == 0x04) {
    rest = 16 + 2;
  } else if (reply[3] == 0x03) {
    std::array<uint8_t, 1> len{};
    if (auto ec = co_await readExact(s, deadline, asio::buffer(len))) {
      co_return broken(ioDetail("answer the SOCKS5 request", ec));
    }
    rest = size_t{len[0]} + 2;
  } else {
    co_return broken("a SOCKS5 reply with an unknown address type");
  }
  std::array<uint8_t, 257> bound{};
  if (auto ec = co_await readExact(s, deadline, asio::buffer(bound.data(), rest))) {
    co_return broken(ioDetail("answer the SOCKS5 request", ec));
  }
  if (reply[1] != 0x00) {
    co_return HandshakeResult{
        HandshakeOutcome::kRefused, reply[1],
        fmt::format("the SOCKS5 parent answered {} ({})", reply[1], socksReplyText(reply[1]))};
  }
  co_return HandshakeResult{HandshakeOutcome::kOk, 0, {}};
}

}  // namespace sandgate::proxy::parent
