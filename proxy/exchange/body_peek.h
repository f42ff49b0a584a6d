// BodyPeek: a request body judged before it is relayed (the Git gate's command list, a form
// body's method override). The wire bytes stay in the client buffer, unconsumed, for the relay
// to forward as they came; a private Beast parser decodes a copy of them.
#pragma once

#include <fmt/format.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <string>
#include <string_view>

namespace sandgate::proxy {

// Decodes a copy of the body's wire bytes with a Beast parser of its own, behind a head that
// frames the body as the real request's does: the same decoder the relay's parser uses, so
// what is judged here is what the relay forwards.
class BodyPeek {
 public:
  BodyPeek(const boost::beast::http::request_parser<boost::beast::http::buffer_body>& real,
           size_t capacity)
      : decoded_(capacity, '\0') {
    p_.eager(true);
    p_.body_limit(boost::none);
    std::string head = "POST / HTTP/1.1\r\nHost: peek\r\n";
    if (real.chunked()) {
      head += "Transfer-Encoding: chunked\r\n";
    } else {
      head += fmt::format("Content-Length: {}\r\n", real.content_length().value_or(0));
    }
    head += "\r\n";
    boost::beast::error_code ec;
    p_.put(boost::asio::buffer(head), ec);
    rewind();
  }

  // Feeds the bytes of `wire` not fed yet. False when the framing is malformed.
  bool feed(std::string_view wire) {
    while (fed_ < wire.size() && !p_.is_done()) {
      boost::beast::error_code ec;
      const size_t used = p_.put(boost::asio::buffer(wire.data() + fed_, wire.size() - fed_), ec);
      fed_ += used;
      if (ec == boost::beast::http::error::need_more ||
          ec == boost::beast::http::error::need_buffer)
        break;
      if (ec) return false;
      if (used == 0) break;
    }
    return true;
  }
  std::string_view decoded() const {
    return {decoded_.data(), decoded_.size() - p_.get().body().size};
  }
  bool done() const { return p_.is_done(); }
  size_t fed() const { return fed_; }
  // The caller consumed `n` wire bytes, all of them fed.
  void consumed(size_t n) { fed_ -= n; }
  // Forgets what was decoded (draining: the bytes are discarded).
  void rewind() {
    p_.get().body().data = decoded_.data();
    p_.get().body().size = decoded_.size();
    p_.get().body().more = true;
  }

 private:
  boost::beast::http::request_parser<boost::beast::http::buffer_body> p_;
  std::string decoded_;
  size_t fed_ = 0;
};

}  // namespace sandgate::proxy
