// Opening a tunnel through a parent proxy on a connected socket: HTTP CONNECT (RFC 9110
// 9.3.6) and SOCKS5 (RFC 1928, user/password RFC 1929). The parent is trusted to carry bytes,
// not to be well-behaved: every read is bounded, nothing it sends is kept or shown, and no byte
// after its answer is consumed (the peek in httpConnect), so the stream handed on starts with
// the upstream's first byte.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sandgate::proxy::parent {

enum class HandshakeOutcome {
  kOk,
  kRefused,     // the parent answered, and said no (403, 5xx, a SOCKS5 failure code)
  kAuthFailed,  // 407, or SOCKS5 authentication refused / required and not configured
  kBroken,      // closed, timed out, or sent what its protocol does not allow
};

struct HandshakeResult {
  HandshakeOutcome outcome = HandshakeOutcome::kBroken;
  int status = 0;      // an HTTP parent's status, or the SOCKS5 reply code
  std::string detail;  // one sentence for logs and the refusal; never the parent's own text
};

// What to ask the parent for: a name (only when the parent resolves) or an address literal.
struct TunnelTarget {
  std::string host;  // a DNS name, or an address's canonical text (IPv6 without brackets)
  bool isAddress = false;
  bool v6 = false;
  std::vector<uint8_t> addressBytes;  // 4 or 16 bytes when isAddress
  uint16_t port = 0;
};

// The longest head an HTTP parent may answer a CONNECT with.
inline constexpr size_t kMaxParentHead = 16 * 1024;

// CONNECT host:port; `proxyAuthorization`, when not empty, is the whole field value
// ("Basic ..."). Every operation ends by `deadline` (a timer set to expire then).
boost::asio::awaitable<HandshakeResult> httpConnect(boost::asio::ip::tcp::socket& s,
                                                    boost::asio::steady_timer& deadline,
                                                    const TunnelTarget& target,
                                                    std::string_view proxyAuthorization);

// A SOCKS5 CONNECT; user/password (RFC 1929) when `user` is set.
boost::asio::awaitable<HandshakeResult> socks5Connect(boost::asio::ip::tcp::socket& s,
                                                      boost::asio::steady_timer& deadline,
                                                      const TunnelTarget& target,
                                                      std::optional<std::string_view> user,
                                                      std::string_view password);

// The pure parts, for unit tests and the fuzz target.
// The status of an HTTP response head ("HTTP/1.1 200 ..."), or nullopt when it is not one.
std::optional<int> parseStatusLine(std::string_view head);
// The CONNECT request sandgate sends.
std::string connectRequest(const TunnelTarget& target, std::string_view proxyAuthorization);
// The SOCKS5 CONNECT request (RFC 1928 section 4): ATYP domain for a name, else IPv4/IPv6.
std::optional<std::vector<uint8_t>> socks5Request(const TunnelTarget& target);

}  // namespace sandgate::proxy::parent
