// Endpoints as the audit log and the admin protocol write them.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <string>

namespace sandgate::proxy {

// "ip:port" of an endpoint, IPv6 in brackets.
std::string endpointText(const boost::asio::ip::tcp::endpoint& ep);

}  // namespace sandgate::proxy
