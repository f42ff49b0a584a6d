// The non-template helpers of the message relay (proxy/exchange/relay.h): a request head that
// carried an injected credential is overwritten in place before its memory goes back to the
// allocator, and a message whose body is in hand is formatted byte for byte as Beast's serializer
// would.
#include "proxy/exchange/relay.h"

#include <gtest/gtest.h>

#include <boost/beast/core/buffer_traits.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string>
#include <string_view>

namespace sandgate::proxy {
namespace {

namespace http = boost::beast::http;

bool allZero(std::string_view v) { return v.find_first_not_of('\0') == std::string_view::npos; }

TEST(CleanseRequestHead, OverwritesTheTargetAndEveryFieldValue) {
  http::request<http::empty_body> req{http::verb::get, "/v1/models?key=sk-live-0123456789", 11};
  req.set(http::field::host, "api.test");
  req.set(http::field::authorization, "Bearer sk-live-0123456789");
  req.insert("X-Trace", "plain");
  const size_t targetSize = req.target().size();

  cleanseRequestHead(req);

  EXPECT_EQ(req.target().size(), targetSize);
  EXPECT_TRUE(allZero(req.target()));
  size_t fields = 0;
  for (const auto& f : req) {
    ++fields;
    EXPECT_FALSE(f.value().empty()) << f.name_string();
    EXPECT_TRUE(allZero(f.value())) << f.name_string();
  }
  EXPECT_EQ(fields, 3u);
}

TEST(CleanseRequestHead, AnEmptyHeadIsLeftAlone) {
  http::request<http::empty_body> req;
  cleanseRequestHead(req);
  EXPECT_TRUE(req.target().empty());
  EXPECT_EQ(req.begin(), req.end());
}

// What Beast's serializer writes for the whole message when the relay hands it the body as it
// does: one buffer_body piece, no data at all for an empty one (an empty piece of data would be
// a zero-length chunk, which ends a chunked body).
template <bool isRequest>
std::string beastBytes(const http::message<isRequest, http::string_body>& m) {
  http::message<isRequest, http::buffer_body> relayed{m.base()};
  std::string body = m.body();
  relayed.body().data = body.empty() ? nullptr : body.data();
  relayed.body().size = body.size();
  relayed.body().more = false;
  http::serializer<isRequest, http::buffer_body> sr(relayed);
  std::string out;
  boost::beast::error_code ec;
  while (!sr.is_done() && !ec) {
    sr.next(ec, [&](boost::beast::error_code&, const auto& buffers) {
      for (auto piece : boost::beast::buffers_range_ref(buffers)) {
        out.append(static_cast<const char*>(piece.data()), piece.size());
      }
      sr.consume(boost::beast::buffer_bytes(buffers));
    });
  }
  EXPECT_FALSE(ec) << ec.message();
  return out;
}

template <class Message>
std::string formatted(const Message& m) {
  return formatMessage(m.base(), m.body(),
                       m.chunked() ? MessagePart::kWholeChunked : MessagePart::kWhole);
}

TEST(FormatMessage, RequestsAreTheBytesBeastWrites) {
  http::request<http::string_body> get{http::verb::get, "/v1/models?limit=2", 11};
  get.set(http::field::host, "api.test:8443");
  get.set(http::field::authorization, "Bearer sk-live-0123456789");
  get.insert("X-Empty", "");
  get.insert("x-lower-case", "kept as sent");
  get.prepare_payload();
  EXPECT_EQ(formatted(get), beastBytes(get));
  EXPECT_EQ(formatted(get).substr(0, 35), "GET /v1/models?limit=2 HTTP/1.1\r\nHo");

  http::request<http::string_body> post{http::verb::post, "/upload", 10};
  post.set(http::field::host, "api.test");
  post.body() = "{\"a\":1}";
  post.prepare_payload();
  EXPECT_EQ(formatted(post), beastBytes(post));
  EXPECT_NE(formatted(post).find("HTTP/1.0\r\n"), std::string::npos);

  http::request<http::string_body> custom;
  custom.method_string("PURGE");
  custom.target("/cache/x");
  custom.version(11);
  custom.set(http::field::host, "api.test");
  EXPECT_EQ(formatted(custom), beastBytes(custom));
  EXPECT_EQ(formatted(custom).substr(0, 24), "PURGE /cache/x HTTP/1.1\r");
}

TEST(FormatMessage, ResponsesAreTheBytesBeastWrites) {
  http::response<http::string_body> ok{http::status::ok, 11};
  ok.set(http::field::content_type, "text/plain");
  ok.body() = "hello, world\n";
  ok.prepare_payload();
  EXPECT_EQ(formatted(ok), beastBytes(ok));

  http::response<http::string_body> reason{http::status::not_found, 10};
  reason.reason("Nothing Here");
  EXPECT_EQ(formatted(reason), beastBytes(reason));
  EXPECT_EQ(formatted(reason), "HTTP/1.0 404 Nothing Here\r\n\r\n");

  // No reason phrase from the upstream, and a status Beast has no name for.
  http::response<http::string_body> unknown;
  unknown.result(299);
  unknown.version(11);
  EXPECT_EQ(formatted(unknown), beastBytes(unknown));
}

TEST(FormatMessage, ChunkedBodiesLeaveAsOneChunkAndTheLast) {
  http::response<http::string_body> res{http::status::ok, 11};
  res.chunked(true);
  res.body() = std::string(300, 'x');
  const std::string mine = formatted(res);
  EXPECT_EQ(mine, beastBytes(res));
  const std::string tail = "\r\n\r\n12c\r\n" + std::string(300, 'x') + "\r\n0\r\n\r\n";
  ASSERT_GE(mine.size(), tail.size());
  EXPECT_EQ(mine.substr(mine.size() - tail.size()), tail);

  res.body().clear();
  EXPECT_EQ(formatted(res), beastBytes(res));
  EXPECT_EQ(formatted(res).substr(formatted(res).size() - 9), "\r\n\r\n0\r\n\r\n");
}

TEST(FormatMessage, TheHeadAloneEndsAtTheBlankLine) {
  http::response<http::string_body> res{http::status::ok, 11};
  res.set(http::field::content_length, "13");  // a response to HEAD: the length, no body
  const std::string head = formatMessage(res.base(), "ignored", MessagePart::kHead);
  EXPECT_EQ(head, "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n");

  res.chunked(true);
  const std::string chunkedHead = formatMessage(res.base(), "", MessagePart::kHead);
  EXPECT_EQ(chunkedHead.substr(chunkedHead.size() - 4), "\r\n\r\n");
  EXPECT_EQ(chunkedHead.find("0\r\n"), std::string::npos);
}

}  // namespace
}  // namespace sandgate::proxy
