// Endpoints as the audit log and the admin protocol write them, and addresses as raw bytes (the
// form policy/ vets them in: this room knows no policy types).
#pragma once

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <string>

namespace sandgate::proxy {

// "ip:port" of an endpoint, IPv6 in brackets.
std::string endpointText(const boost::asio::ip::tcp::endpoint& ep);

// An address from its bytes: the first 4 of `bytes` for IPv4, all 16 for IPv6.
boost::asio::ip::address addressFromBytes(bool v6, const std::array<uint8_t, 16>& bytes);
// The bytes of `a` (IPv4 in the first 4), and whether it is IPv6.
std::array<uint8_t, 16> addressBytes(const boost::asio::ip::address& a, bool& v6);

}  // namespace sandgate::proxy
