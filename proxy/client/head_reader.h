// Reading one request head, the same way on a client's TCP stream (session.cc) and inside an
// intercepted TLS tunnel (intercept_session.cc): bounded by the head limit, strict about bare
// CR and LF, never reading past what the limit allows.
#pragma once

#include <algorithm>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <cstddef>
#include <string_view>

#include "proxy/client/http_validation.h"

namespace sandgate::proxy {

enum class HeadStatus { kComplete, kClosed, kTimeout, kTooLarge, kMalformed };

struct HeadRead {
  HeadStatus status;
  size_t length = 0;  // kComplete: the head's bytes at the start of the buffer
};

// Reads with `readSome(mutable_buffer)` (an awaitable of {error_code, bytes}) until `buffer`
// holds a complete head of at most `limit` bytes. The caller sets the deadline; a read that
// fails with beast::error::timeout is kTimeout, any other failure kClosed.
template <class ReadSome>
boost::asio::awaitable<HeadRead> readRequestHead(boost::beast::flat_buffer& buffer, size_t limit,
                                                 ReadSome readSome) {
  size_t scanned = 0;
  while (true) {
    const auto data = buffer.data();
    const std::string_view view(static_cast<const char*>(data.data()), data.size());
    const long end = findHeadEnd(view, scanned);
    if (end > 0) {
      if (static_cast<size_t>(end) > limit) co_return HeadRead{HeadStatus::kTooLarge};
      co_return HeadRead{HeadStatus::kComplete, static_cast<size_t>(end)};
    }
    if (end < 0) co_return HeadRead{HeadStatus::kMalformed};
    scanned = view.size();
    if (view.size() >= limit) co_return HeadRead{HeadStatus::kTooLarge};
    // Never read more than the limit allows: the buffer is bounded by the head limit.
    const size_t room = std::min<size_t>(limit + 4 - view.size(), 16 * 1024);
    auto [ec, n] = co_await readSome(buffer.prepare(room));
    buffer.commit(n);
    if (ec == boost::beast::error::timeout) co_return HeadRead{HeadStatus::kTimeout};
    if (ec) co_return HeadRead{HeadStatus::kClosed};
  }
}

}  // namespace sandgate::proxy
