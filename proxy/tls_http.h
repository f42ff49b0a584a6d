// HTTP messages over a TlsChannel: the same steps as Beast's async_read_some, async_read_header,
// async_write and async_write_header (same parser and serializer, same results and errors),
// done in the calling coroutine. relay.h picks these for TLS legs. Internal to proxy/.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <tuple>

#include "proxy/tls_channel.h"

namespace sandgate::proxy {

using TlsIoResult = std::tuple<boost::system::error_code, size_t>;
using RequestParser = boost::beast::http::request_parser<boost::beast::http::buffer_body>;
using ResponseParser = boost::beast::http::response_parser<boost::beast::http::buffer_body>;
using RequestSerializer = boost::beast::http::request_serializer<boost::beast::http::buffer_body>;
using ResponseSerializer = boost::beast::http::response_serializer<boost::beast::http::buffer_body>;

boost::asio::awaitable<TlsIoResult> httpReadSome(TlsChannel& s, boost::beast::flat_buffer& b,
                                                 RequestParser& p);
boost::asio::awaitable<TlsIoResult> httpReadSome(TlsChannel& s, boost::beast::flat_buffer& b,
                                                 ResponseParser& p);
boost::asio::awaitable<TlsIoResult> httpReadHeader(TlsChannel& s, boost::beast::flat_buffer& b,
                                                   ResponseParser& p);
boost::asio::awaitable<TlsIoResult> httpWrite(TlsChannel& s, RequestSerializer& sr);
boost::asio::awaitable<TlsIoResult> httpWrite(TlsChannel& s, ResponseSerializer& sr);
boost::asio::awaitable<TlsIoResult> httpWriteHeader(TlsChannel& s, RequestSerializer& sr);
boost::asio::awaitable<TlsIoResult> httpWriteHeader(TlsChannel& s, ResponseSerializer& sr);

}  // namespace sandgate::proxy
