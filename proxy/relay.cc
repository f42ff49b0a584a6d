// The non-template parts of the message relay (see relay.h).
#include "proxy/relay.h"

#include <fmt/format.h>
#include <openssl/crypto.h>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

bool isPeerClosed(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message ||
         ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::connection_aborted ||
         ec == asio::ssl::error::stream_truncated;
}

void cleanseBuffer(void* data, size_t size) { OPENSSL_cleanse(data, size); }

void cleanseRequestHead(http::request_header<>& head) {
  // The views point into the fields' own storage, which the head owns and may overwrite.
  auto cleanse = [](std::string_view v) {
    if (!v.empty()) OPENSSL_cleanse(const_cast<char*>(v.data()), v.size());
  };
  cleanse(head.target());
  for (const auto& field : head) cleanse(field.value());
}

bool frameResponse(ResponseParser& rp, unsigned clientVersion, bool clientKeepAlive,
                   bool lengthMayChange) {
  auto& res = rp.get();
  res.version(clientVersion);
  bool keepAlive = clientKeepAlive;
  if (!rp.is_done()) {
    const bool reframe = lengthMayChange || (!rp.chunked() && !rp.content_length());
    if (clientVersion == 10 && (rp.chunked() || reframe)) {
      res.erase(http::field::content_length);
      res.chunked(false);
      keepAlive = false;
    } else if (reframe) {
      res.erase(http::field::content_length);
      res.chunked(true);
    }
  }
  res.keep_alive(keepAlive);
  return keepAlive;
}

void noteResponseFailure(const RelayOutcome& back, AuditRecord& rec) {
  if (back.error == RelayError::kRead) {
    rec.error = fmt::format("upstream body: {}", back.ec.message());
    rec.reason =
        back.ec == beast::error::timeout ? reason::kUpstreamTimeout : reason::kUpstreamReset;
    rec.verdict = "error";
  } else if (back.error == RelayError::kWrite) {
    rec.error = fmt::format("client: {}", back.ec.message());
  }
}

void noteClientReadFailure(const RelayOutcome& sent, AuditRecord& rec) {
  rec.verdict = "error";
  rec.reason = sent.ec == beast::error::timeout ? reason::kClientTimeout : "client_closed";
  rec.error = sent.ec.message();
}

Refusal upstreamSendRefusal(const RelayOutcome& sent, const AuditRecord& rec) {
  return Refusal{502,      reason::kUpstreamReset,
                 rec.task, rec.host,
                 rec.rule, fmt::format("sending to {} failed: {}", rec.upstream, sent.ec.message()),
                 ""};
}

}  // namespace sandgate::proxy
