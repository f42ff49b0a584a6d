// The TLS streams of an intercepted connection: the client side, read through the bytes that
// arrived with the CONNECT head, and the verified upstream side. Internal to proxy/.
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <utility>

#include "proxy/deadline_stream.h"

namespace sandgate::proxy {

// The client's stream, read through the bytes that arrived with the CONNECT head first:
// the start of the ClientHello must not be lost when the stream changes protocol.
class PrefixedStream {
 public:
  using executor_type = DeadlineStream::executor_type;
  using next_layer_type = DeadlineStream;
  using lowest_layer_type = DeadlineStream;

  explicit PrefixedStream(DeadlineStream& s) : s_(s) {}
  executor_type get_executor() { return s_.get_executor(); }
  DeadlineStream& next_layer() { return s_; }
  DeadlineStream& lowest_layer() { return s_; }
  boost::beast::flat_buffer& prefix() { return prefix_; }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& b, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::beast::error_code, size_t)>(
        [this](auto handler, const MutableBuffers& bufs) {
          if (prefix_.size() == 0) {
            s_.async_read_some(bufs, std::move(handler));
            return;
          }
          size_t n = boost::asio::buffer_copy(bufs, prefix_.data());
          prefix_.consume(n);
          auto ex = boost::asio::get_associated_executor(handler, s_.get_executor());
          boost::asio::post(ex, [h = std::move(handler), n]() mutable {
            std::move(h)(boost::beast::error_code{}, n);
          });
        },
        token, b);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& b, Token&& token) {
    return s_.async_write_some(b, std::forward<Token>(token));
  }

 private:
  DeadlineStream& s_;
  boost::beast::flat_buffer prefix_;
};

// Beast's ssl_stream, not asio's: asio's TLS stream encrypts one buffer of a sequence per
// write, so a response's head and body would leave as separate records and sends; the flat
// stream inside beast::ssl_stream coalesces a sequence into one record first.
using ClientTls = boost::beast::ssl_stream<PrefixedStream>;
using UpstreamTlsStream = boost::beast::ssl_stream<DeadlineStream>;

}  // namespace sandgate::proxy
