// The non-template parts of the message relay (see relay.h).
#include "proxy/exchange/relay.h"

#include <fmt/format.h>
#include <openssl/crypto.h>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <charconv>

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

bool isFramingError(const beast::error_code& ec) {
  if (ec.category() != beast::error_code(http::error::bad_chunk).category()) return false;
  return ec != http::error::end_of_stream && ec != http::error::partial_message &&
         ec != http::error::need_more && ec != http::error::need_buffer;
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

namespace {

template <bool isRequest>
std::string format(const http::header<isRequest>& h, std::string_view body, MessagePart part) {
  // The start line as Beast's fields writer makes it: "GET /x HTTP/1.1", "HTTP/1.1 200 OK"
  // (a response without a reason phrase gets the standard one).
  std::string_view first, second;
  char status[3];
  if constexpr (isRequest) {
    first = h.method_string();
    second = h.target();
  } else {
    const unsigned code = h.result_int();
    status[0] = static_cast<char>('0' + code / 100 % 10);
    status[1] = static_cast<char>('0' + code / 10 % 10);
    status[2] = static_cast<char>('0' + code % 10);
    first = std::string_view(status, sizeof status);
    second = h.reason();
    if (second.empty()) second = http::obsolete_reason(h.result());
  }
  char version[] = "HTTP/1.1";
  version[5] = static_cast<char>('0' + h.version() / 10 % 10);
  version[7] = static_cast<char>('0' + h.version() % 10);
  const std::string_view versionText(version, sizeof version - 1);
  const bool headOnly = part == MessagePart::kHead;
  const bool chunked = part == MessagePart::kWholeChunked;
  char hex[2 * sizeof(size_t)];
  size_t hexLen = 0;
  if (chunked && !body.empty()) {
    hexLen = static_cast<size_t>(std::to_chars(hex, hex + sizeof hex, body.size(), 16).ptr - hex);
  }
  constexpr std::string_view kLastChunk = "0\r\n\r\n";

  size_t size = versionText.size() + first.size() + second.size() + 4 + 2;
  for (const auto& f : h) size += f.name_string().size() + f.value().size() + 4;
  if (!headOnly) {
    size += !chunked       ? body.size()
            : body.empty() ? kLastChunk.size()
                           : hexLen + body.size() + 4 + kLastChunk.size();
  }
  std::string out;
  out.reserve(size);
  if constexpr (isRequest) {
    out.append(first).append(" ").append(second).append(" ").append(versionText);
  } else {
    out.append(versionText).append(" ").append(first).append(" ").append(second);
  }
  out.append("\r\n");
  for (const auto& f : h) out.append(f.name_string()).append(": ").append(f.value()).append("\r\n");
  out.append("\r\n");
  if (!headOnly && !chunked) out.append(body);
  if (chunked) {
    if (!body.empty()) out.append(hex, hexLen).append("\r\n").append(body).append("\r\n");
    out.append(kLastChunk);
  }
  return out;
}

}  // namespace

std::string formatMessage(const http::request_header<>& h, std::string_view body,
                          MessagePart part) {
  return format(h, body, part);
}

std::string formatMessage(const http::response_header<>& h, std::string_view body,
                          MessagePart part) {
  return format(h, body, part);
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
    rec.verdict = Outcome::kError;
  } else if (back.error == RelayError::kWrite) {
    rec.error = fmt::format("client: {}", back.ec.message());
  } else if (back.error == RelayError::kDecode) {
    rec.error = fmt::format("upstream body: {}", back.detail);
    rec.reason = reason::kUpstreamBadResponse;
    rec.verdict = Outcome::kError;
  }
}

void noteClientReadFailure(const RelayOutcome& sent, AuditRecord& rec) {
  rec.verdict = Outcome::kError;
  rec.reason = sent.ec == beast::error::timeout ? reason::kClientTimeout : reason::kClientClosed;
  rec.error = sent.ec.message();
}

Refusal upstreamSendRefusal(const RelayOutcome& sent, const AuditRecord& rec) {
  return Refusal{.status = 502,
                 .reason = reason::kUpstreamReset,
                 .task = rec.task,
                 .host = rec.host,
                 .rule = rec.rule,
                 .detail = fmt::format("sending to {} failed: {}", rec.upstream, sent.ec.message()),
                 .outcome = Outcome::kError};
}

Refusal undecodableBodyRefusal(const RelayOutcome& back, const AuditRecord& rec) {
  return Refusal{
      .status = 502,
      .reason = reason::kUpstreamBadResponse,
      .task = rec.task,
      .host = rec.host,
      .rule = rec.rule,
      .detail = fmt::format("the response body could not be decoded to scrub it: {}", back.detail),
      .outcome = Outcome::kError};
}

}  // namespace sandgate::proxy
