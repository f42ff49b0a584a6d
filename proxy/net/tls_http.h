// HTTP messages over a TlsChannel: the same steps as Beast's async_read_some, async_read_header,
// async_write and async_write_header (same parser and serializer, same results and errors),
// done in the calling coroutine. relay.h picks these for TLS legs and Beast's own operations
// for TCP. Internal to proxy/.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <tuple>

#include "proxy/net/tls_channel.h"

namespace sandgate::proxy {

using TlsIoResult = std::tuple<boost::system::error_code, size_t>;
using ResponseParser = boost::beast::http::response_parser<boost::beast::http::buffer_body>;

// How much of a message one call reads or writes: Beast's async_read_some / async_read_header,
// async_write / async_write_header.
enum class HttpStep { kSome, kHeader, kWhole };

// Reads into `p` (kSome: until the parser makes progress; kHeader: until the head is parsed).
template <bool isRequest>
boost::asio::awaitable<TlsIoResult> httpRead(
    TlsChannel& s, boost::beast::flat_buffer& b,
    boost::beast::http::parser<isRequest, boost::beast::http::buffer_body>& p, HttpStep step);
// Writes what `sr` has (kHeader: the head only; kWhole: until done, or until the body piece of
// a buffer_body is used up: then the error is need_buffer, as with Beast).
template <bool isRequest>
boost::asio::awaitable<TlsIoResult> httpWrite(
    TlsChannel& s, boost::beast::http::serializer<isRequest, boost::beast::http::buffer_body>& sr,
    HttpStep step);

// Writes all of `bytes` (relay.h's writeBytes, for a TlsChannel).
inline boost::asio::awaitable<TlsIoResult> writeBytes(TlsChannel& s,
                                                      boost::asio::const_buffer bytes) {
  return s.write(bytes);
}

// Decrypted bytes into `into` (relay.h's readBytes, for a TlsChannel).
inline boost::asio::awaitable<TlsIoResult> readBytes(TlsChannel& s,
                                                     boost::asio::mutable_buffer into) {
  return s.readSome(into);
}

// Has the peer spoken without being asked to (relay.h's peerHasSpoken, for a TlsChannel)?
inline bool peerHasSpoken(TlsChannel& s) { return s.peerHasSpoken(); }

extern template boost::asio::awaitable<TlsIoResult> httpRead<true>(
    TlsChannel&, boost::beast::flat_buffer&,
    boost::beast::http::parser<true, boost::beast::http::buffer_body>&, HttpStep);
extern template boost::asio::awaitable<TlsIoResult> httpRead<false>(
    TlsChannel&, boost::beast::flat_buffer&,
    boost::beast::http::parser<false, boost::beast::http::buffer_body>&, HttpStep);
extern template boost::asio::awaitable<TlsIoResult> httpWrite<true>(
    TlsChannel&, boost::beast::http::serializer<true, boost::beast::http::buffer_body>&, HttpStep);
extern template boost::asio::awaitable<TlsIoResult> httpWrite<false>(
    TlsChannel&, boost::beast::http::serializer<false, boost::beast::http::buffer_body>&, HttpStep);

}  // namespace sandgate::proxy
