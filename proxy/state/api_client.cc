// One verified HTTPS POST for broker/'s GitHub App minter (see api_client.h).
#include "proxy/state/api_client.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cctype>

#include "common/host_port.h"

namespace sandgate::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// A token answer is a few hundred bytes; an error page is not worth more than this.
constexpr size_t kMaxResponseBody = 256 * 1024;

struct Url {
  HostPort authority;
  std::string target;
  std::string hostField;  // as the Host field writes it
};

std::optional<Url> parseHttpsUrl(std::string_view url) {
  constexpr std::string_view kScheme = "https://";
  if (!url.starts_with(kScheme)) return std::nullopt;
  url.remove_prefix(kScheme.size());
  const size_t slash = url.find('/');
  const std::string_view authority = url.substr(0, slash);
  auto hp = parseAuthority(authority, 443);
  if (!hp) return std::nullopt;
  Url out{*hp, slash == std::string_view::npos ? "/" : std::string(url.substr(slash)),
          std::string(authority)};
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The request head holds the App JWT: wiped before its memory goes back.
void cleanseFields(http::fields& f) {
  for (auto& field : f) {
    auto v = field.value();
    OPENSSL_cleanse(const_cast<char*>(v.data()), v.size());
  }
}

}  // namespace

broker::ApiResponse HttpsApiClient::post(const broker::ApiRequest& req,
                                         std::stop_token stop) const {
  broker::ApiResponse out;
  auto url = parseHttpsUrl(req.url);
  if (!url) {
    out.error = "not an https:// URL";
    return out;
  }
  asio::io_context ioc;
  boost::system::error_code addrEc;
  const asio::ip::address literal = asio::ip::make_address(url->authority.host, addrEc);
  const bool isAddress = !addrEc;
  std::vector<tcp::endpoint> endpoints;
  std::string via;  // how the address was found, for errors
  if (auto it = resolve_.find(lower(url->authority.host)); it != resolve_.end()) {
    // resolve: overrides, as for every upstream (tests, air-gapped setups).
    endpoints.emplace_back(asio::ip::make_address(it->second.address.str()),
                           it->second.port.value_or(url->authority.port));
    via = " (resolve override)";
  } else if (isAddress) {
    endpoints.emplace_back(literal, url->authority.port);
  }

  asio::ssl::stream<beast::tcp_stream> stream(ioc, tls_->contextFor(req.credential));
  // Always verified: the chain against the snapshot's upstream roots, and the name (or
  // address), as for intercepted requests.
  SSL* ssl = stream.native_handle();
  if (!verifyPeerAs(ssl, url->authority.host, isAddress)) {
    out.error = "TLS could not be set up";
    return out;
  }

  http::request<http::string_body> request{http::verb::post, url->target, 11};
  request.set(http::field::host, url->hostField);
  request.set(http::field::user_agent, "sandgate");
  request.set(http::field::accept, "application/vnd.github+json");
  request.set("X-GitHub-Api-Version", "2022-11-28");
  request.set(http::field::content_type, "application/json");
  request.set(http::field::connection, "close");
  if (req.bearer) {
    // reveal(): the App JWT goes to the credential's own API, over the TLS verified above.
    std::string value = "Bearer " + std::string(req.bearer->reveal());
    request.set(http::field::authorization, value);
    OPENSSL_cleanse(value.data(), value.size());
  }
  request.body() = std::string(req.body);
  request.prepare_payload();

  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxResponseBody);
  const auto deadline = std::chrono::steady_clock::now() + req.timeout;

  auto exchange = [&]() -> asio::awaitable<void> {
    auto& tcpStream = stream.next_layer();
    tcpStream.expires_at(deadline);
    if (endpoints.empty()) {
      tcp::resolver resolver(ioc);
      auto [ec, results] = co_await resolver.async_resolve(
          url->authority.host, std::to_string(url->authority.port), kTuple);
      if (ec) {
        out.error = fmt::format("cannot resolve {}: {}", url->authority.host, ec.message());
        co_return;
      }
      for (const auto& r : results) endpoints.push_back(r.endpoint());
    }
    auto [cec, ep] = co_await tcpStream.async_connect(endpoints, kTuple);
    if (cec) {
      out.error = fmt::format("cannot connect to {}{}: {}", url->hostField, via, cec.message());
      co_return;
    }
    auto [hec] = co_await stream.async_handshake(asio::ssl::stream_base::client, kTuple);
    if (hec) {
      const long vr = SSL_get_verify_result(ssl);
      out.error = fmt::format("TLS with {} failed: {}", url->hostField,
                              vr != X509_V_OK ? X509_verify_cert_error_string(vr) : hec.message());
      co_return;
    }
    auto [wec, wn] = co_await http::async_write(stream, request, kTuple);
    if (wec) {
      out.error = fmt::format("sending the request failed: {}", wec.message());
      co_return;
    }
    beast::flat_buffer buffer;
    auto [rec, rn] = co_await http::async_read(stream, buffer, parser, kTuple);
    if (rec) {
      out.error = fmt::format("reading the answer failed: {}", rec.message());
      co_return;
    }
    out.status = static_cast<int>(parser.get().result_int());
    out.body = std::move(parser.get().body());
  };
  asio::co_spawn(ioc, exchange(), [&](std::exception_ptr e) {
    if (e && out.error.empty()) out.error = "the request failed";
  });
  // A stop request (the store closing) ends the exchange at once.
  std::stop_callback onStop(stop, [&ioc] { ioc.stop(); });
  ioc.run();
  if (stop.stop_requested() && out.status == 0 && out.error.empty()) {
    out.error = "stopped (credential store shutting down)";
  }
  cleanseFields(request);
  if (out.status == 0 && out.error.empty()) out.error = "no answer";
  return out;
}

}  // namespace sandgate::proxy
