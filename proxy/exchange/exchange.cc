// The non-template parts of the shared exchange (see exchange.h).
#include "proxy/exchange/exchange.h"

#include <algorithm>

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace http = boost::beast::http;

std::optional<Refusal> parseRequestHead(RequestParser& parser, boost::beast::flat_buffer& buffer,
                                        size_t headLen, const config::EffectiveLimits& limits,
                                        const AuditRecord& rec) {
  parser.header_limit(static_cast<uint32_t>(std::min<uint64_t>(limits.maxHeaderBytes, UINT32_MAX)));
  parser.body_limit(boost::none);
  boost::beast::error_code ec;
  const size_t used = parser.put(asio::buffer(buffer.data().data(), headLen), ec);
  if (ec || used != headLen || !parser.is_header_done()) {
    return Refusal{.status = 400,
                   .reason = reason::kBadHeader,
                   .task = rec.task,
                   .host = rec.host,
                   .detail = fmt::format("malformed request head: {}",
                                         ec ? ec.message() : std::string("incomplete"))};
  }
  buffer.consume(headLen);
  return std::nullopt;
}

Refusal framingRefusal(std::string_view reason, const std::string& detail, const AuditRecord& rec) {
  return Refusal{.status = 400,
                 .reason = reason,
                 .task = rec.task,
                 .host = rec.host,
                 .rule = rec.rule,
                 .detail = fmt::format("malformed request body: {}", detail),
                 .hint =
                     "send the body with Content-Length, or chunked as RFC 9112 section 7.1 "
                     "has it, without trailer fields"};
}

Refusal upgradeRefusal(const Request& req, const AuditRecord& rec, const std::string& rule) {
  return Refusal{
      .status = 400,
      .reason = reason::kUpgradeNotSupported,
      .task = rec.task,
      .host = rec.host,
      .rule = rule,
      .detail = fmt::format("cannot switch to '{}' here: only websocket upgrades are relayed",
                            std::string_view(req[http::field::upgrade]).substr(0, 64)),
      .hint = "send the request without Upgrade"};
}

}  // namespace sandgate::proxy
