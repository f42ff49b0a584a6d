// Endpoints as text, addresses as bytes (see endpoint.h).
#include "proxy/net/endpoint.h"

#include <fmt/format.h>

#include <algorithm>

namespace sandgate::proxy {

using boost::asio::ip::tcp;

std::string endpointText(const tcp::endpoint& ep) {
  auto a = ep.address();
  return a.is_v6() ? fmt::format("[{}]:{}", a.to_string(), ep.port())
                   : fmt::format("{}:{}", a.to_string(), ep.port());
}

boost::asio::ip::address addressFromBytes(bool v6, const std::array<uint8_t, 16>& bytes) {
  if (v6) {
    boost::asio::ip::address_v6::bytes_type b;
    std::copy(bytes.begin(), bytes.end(), b.begin());
    return boost::asio::ip::address_v6(b);
  }
  boost::asio::ip::address_v4::bytes_type b;
  std::copy(bytes.begin(), bytes.begin() + 4, b.begin());
  return boost::asio::ip::address_v4(b);
}

std::array<uint8_t, 16> addressBytes(const boost::asio::ip::address& a, bool& v6) {
  std::array<uint8_t, 16> out{};
  v6 = a.is_v6();
  if (v6) {
    auto b = a.to_v6().to_bytes();
    std::copy(b.begin(), b.end(), out.begin());
  } else {
    auto b = a.to_v4().to_bytes();
    std::copy(b.begin(), b.end(), out.begin());
  }
  return out;
}

}  // namespace sandgate::proxy
