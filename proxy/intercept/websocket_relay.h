// The WebSocket relay of an intercepted connection: after a 101, the upstream's frames are
// parsed (RFC 6455) and their payloads scrubbed on their way to the client; the client's
// (masked) frames go upstream as bytes. Internal to proxy/.
//
// No extension is ever in use (the upgrade request goes without Sec-WebSocket-Extensions and a
// 101 that selects one is refused), so every payload is the message's own bytes and an
// intermediary may fragment a message anew (RFC 6455, section 5.4). Each text or binary message
// has one streaming scrubber across its frames, so a secret split across fragments is found;
// what it lets out goes to the client as fragments of the same message, one per read, framed
// with their own lengths (a replacement of another length changes nothing). Nothing is held
// but a frame header, a control frame (at most 125 bytes) and the scrubber's tail.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/fields.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "broker/scrubber.h"
#include "proxy/client/refusal.h"
#include "proxy/intercept/tls_relay.h"

namespace sandgate::proxy {

class TaskMetrics;

// Upstream-to-client frames in, scrubbed frames out (see the top of this file). A protocol
// error (a masked frame, reserved bits, an unknown opcode, a fragmented or oversized control
// frame, a continuation out of place, a 64-bit length with its top bit set) ends the stream:
// the client gets a Close frame with status 1002 after what came before it.
class WebsocketScrubber : public RelayFilter {
 public:
  explicit WebsocketScrubber(std::shared_ptr<const broker::ScrubSet> set);
  ~WebsocketScrubber() override;

  bool feed(std::string_view in, std::string& out) override;
  std::string error() const override { return error_; }

  // Replacements made, by credential (for the per-credential metric).
  const std::map<std::string, uint64_t>& countByCredential() const { return byCredential_; }

 private:
  bool fail(std::string why, std::string& out);
  // Parses the header in head_ once it is complete; false on a protocol error.
  bool startFrame(std::string& out);
  void endFrame(std::string& out);
  // Sends what the message's scrubber let out so far as a fragment (`fin`: the last one).
  void flushMessage(bool fin, std::string& out);
  void count(const broker::Scrubber& s);

  std::shared_ptr<const broker::ScrubSet> set_;
  std::string error_;
  bool failed_ = false;
  std::string head_;     // the header of the frame being read, until complete
  size_t headNeed_ = 2;  // bytes of header needed (2, then with the length's and mask's)
  bool inFrame_ = false;
  bool fin_ = false;
  uint8_t opcode_ = 0;
  uint64_t remaining_ = 0;                   // payload bytes of the current frame still to come
  std::string control_;                      // a control frame's payload (<= 125 bytes)
  std::optional<broker::Scrubber> message_;  // the data message under way
  uint8_t messageOpcode_ = 0;
  bool messageStarted_ = false;  // a fragment of it went out: the next is a continuation
  std::string pending_;          // scrubbed bytes of the message not yet framed
  std::map<std::string, uint64_t> byCredential_;
};

// The Sec-WebSocket-Extensions the upstream's 101 selects (empty when none). sandgate offered
// none, so any is refused: frames it compressed could not be scrubbed.
std::string selectedWebsocketExtensions(const boost::beast::http::fields& res);
// The answer instead of such a 101: 502 websocket_extension_selected.
Refusal websocketExtensionRefusal(std::string_view extensions, std::string task, std::string host,
                                  std::string rule);

// relayTls with the upstream's frames scrubbed by `set` (none: relayed as they are); the
// replacements are counted in `metrics` (may be null).
boost::asio::awaitable<TunnelResult> relayWebsocket(
    TlsChannel& client, boost::beast::flat_buffer& clientEarly, TlsChannel& upstream,
    boost::beast::flat_buffer& upstreamEarly, std::chrono::steady_clock::duration idleTimeout,
    std::shared_ptr<const broker::ScrubSet> set, TaskMetrics* metrics);

}  // namespace sandgate::proxy
