// The completion token of the data path (every room of proxy/ awaits with it).
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sandgate::proxy {

// Errors are values, never exceptions: `auto [ec, n] = co_await s.async_read_some(b, kUse);`.
inline constexpr auto kUse = boost::asio::as_tuple(boost::asio::use_awaitable);

}  // namespace sandgate::proxy
