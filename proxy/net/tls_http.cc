// HTTP messages over a TlsChannel (see tls_http.h).
#include "proxy/net/tls_http.h"

#include <openssl/crypto.h>

#include <boost/asio/error.hpp>
#include <boost/beast/core/buffer_traits.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>
#include <iterator>
#include <string>

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;

// Beast's read_some_op: parse what is buffered; read only when the parser needs more. For the
// head, again until it is parsed.
template <bool isRequest>
asio::awaitable<TlsIoResult> httpRead(TlsChannel& s, boost::beast::flat_buffer& b,
                                      http::parser<isRequest, http::buffer_body>& p,
                                      HttpStep step) {
  error_code ec;
  size_t used = 0;
  bool parse = b.size() > 0;
  while (true) {
    if (parse) {
      const size_t n = p.put(b.data(), ec);
      used += n;
      b.consume(n);
      if (ec != http::error::need_more && (ec || step != HttpStep::kHeader || p.is_header_done())) {
        break;
      }
      ec = {};
    }
    parse = true;
    const size_t size = boost::beast::read_size(b, 65536);
    if (size == 0) {
      ec = http::error::buffer_overflow;
      break;
    }
    auto into = b.prepare(size);
    auto [rec, n] = co_await s.readSome(into);
    b.commit(n);
    if (rec == asio::error::eof) {
      if (p.got_some()) {
        // As Beast does: the message ends here; the caller sees the EOF on its next read.
        ec = {};
        p.put_eof(ec);
      } else {
        ec = http::error::end_of_stream;
      }
      break;
    }
    if (rec) {
      ec = rec;
      break;
    }
  }
  co_return TlsIoResult{ec, used};
}

// Beast's write_some_op in a loop. What the serializer offers in several buffers (a head and
// a small body, a chunk and its framing) is flattened first, so that it leaves as one TLS
// record; a single buffer (a body piece) is sent as it is.
template <bool isRequest>
asio::awaitable<TlsIoResult> httpWrite(TlsChannel& s,
                                       http::serializer<isRequest, http::buffer_body>& sr,
                                       HttpStep step) {
  const bool headerOnly = step == HttpStep::kHeader;
  sr.split(headerOnly);  // as async_write_header and async_write do
  size_t total = 0;
  error_code result;
  std::string flat;
  while (headerOnly ? !sr.is_header_done() : !sr.is_done()) {
    error_code ec;
    asio::const_buffer out;
    sr.next(ec, [&flat, &out](error_code&, const auto& buffers) {
      auto range = boost::beast::buffers_range_ref(buffers);
      auto first = range.begin();
      if (first != range.end() && std::next(first) == range.end()) {
        out = *first;
        return;
      }
      // A head may hold the injected credential: wiped before the buffer is reused, and room
      // made at once, so that no growth frees a partly filled copy without wiping it.
      OPENSSL_cleanse(flat.data(), flat.size());
      flat.clear();
      flat.reserve(boost::beast::buffer_bytes(buffers));
      for (auto piece : range) flat.append(static_cast<const char*>(piece.data()), piece.size());
      out = asio::const_buffer(flat.data(), flat.size());
    });
    if (ec) {  // need_buffer: the body piece is used up
      result = ec;
      break;
    }
    auto [wec, n] = co_await s.write(out);
    if (wec) {
      result = wec;
      break;
    }
    sr.consume(out.size());
    total += out.size();
  }
  // A request head holds the injected credential.
  OPENSSL_cleanse(flat.data(), flat.size());
  co_return TlsIoResult{result, total};
}

template asio::awaitable<TlsIoResult> httpRead<true>(TlsChannel&, boost::beast::flat_buffer&,
                                                     http::parser<true, http::buffer_body>&,
                                                     HttpStep);
template asio::awaitable<TlsIoResult> httpRead<false>(TlsChannel&, boost::beast::flat_buffer&,
                                                      http::parser<false, http::buffer_body>&,
                                                      HttpStep);
template asio::awaitable<TlsIoResult> httpWrite<true>(TlsChannel&,
                                                      http::serializer<true, http::buffer_body>&,
                                                      HttpStep);
template asio::awaitable<TlsIoResult> httpWrite<false>(TlsChannel&,
                                                       http::serializer<false, http::buffer_body>&,
                                                       HttpStep);

}  // namespace sandgate::proxy
