// Endpoints as text (see endpoint.h).
#include "proxy/net/endpoint.h"

#include <fmt/format.h>

namespace sandgate::proxy {

using boost::asio::ip::tcp;

std::string endpointText(const tcp::endpoint& ep) {
  auto a = ep.address();
  return a.is_v6() ? fmt::format("[{}]:{}", a.to_string(), ep.port())
                   : fmt::format("{}:{}", a.to_string(), ep.port());
}

}  // namespace sandgate::proxy
