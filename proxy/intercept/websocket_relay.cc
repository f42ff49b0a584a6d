// Frame-aware WebSocket relay: the upstream's frames scrubbed (see websocket_relay.h).
#include "proxy/intercept/websocket_relay.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/beast/core/string.hpp>

#include "proxy/observe/metrics.h"

namespace sandgate::proxy {

namespace {

constexpr uint8_t kFin = 0x80;
constexpr uint8_t kRsv = 0x70;
constexpr uint8_t kMask = 0x80;
constexpr uint8_t kContinuation = 0x0;
constexpr uint8_t kText = 0x1;
constexpr uint8_t kBinary = 0x2;
constexpr uint8_t kClose = 0x8;
constexpr uint8_t kPing = 0x9;
constexpr uint8_t kPong = 0xa;
constexpr size_t kMaxControlPayload = 125;

bool isControl(uint8_t opcode) { return (opcode & 0x8) != 0; }

// An unmasked (server) frame, with the shortest length encoding.
void appendFrame(bool fin, uint8_t opcode, std::string_view payload, std::string& out) {
  out += static_cast<char>((fin ? kFin : 0) | opcode);
  const uint64_t n = payload.size();
  if (n <= 125) {
    out += static_cast<char>(n);
  } else if (n <= 0xffff) {
    out += static_cast<char>(126);
    out += static_cast<char>(n >> 8);
    out += static_cast<char>(n & 0xff);
  } else {
    out += static_cast<char>(127);
    for (int shift = 56; shift >= 0; shift -= 8) out += static_cast<char>((n >> shift) & 0xff);
  }
  out.append(payload);
}

// The longest prefix of `s` of at most `max` bytes that does not cut a UTF-8 sequence.
size_t utf8Prefix(std::string_view s, size_t max) {
  if (s.size() <= max) return s.size();
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  return n;
}

}  // namespace

WebsocketScrubber::WebsocketScrubber(std::shared_ptr<const broker::ScrubSet> set)
    : set_(std::move(set)) {}

WebsocketScrubber::~WebsocketScrubber() {
  broker::wipe(control_);
  broker::wipe(head_);
}

bool WebsocketScrubber::fail(std::string why, std::string& out) {
  failed_ = true;
  error_ = "websocket: " + why;
  // What the message's scrubber holds is dropped, not flushed: the stream is broken anyway.
  message_.reset();
  broker::wipe(pending_);
  broker::wipe(control_);
  // 1002: protocol error (RFC 6455, section 7.4.1).
  appendFrame(true, kClose, std::string_view("\x03\xea", 2), out);
  return false;
}

void WebsocketScrubber::count(const broker::Scrubber& s) {
  for (const auto& [credential, n] : s.countByCredential()) byCredential_[credential] += n;
}

void WebsocketScrubber::flushMessage(bool fin, std::string& out) {
  if (pending_.empty() && !fin) return;
  appendFrame(fin, messageStarted_ ? kContinuation : messageOpcode_, pending_, out);
  messageStarted_ = true;
  pending_.clear();
}

bool WebsocketScrubber::startFrame(std::string& out) {
  const auto b0 = static_cast<uint8_t>(head_[0]);
  const auto b1 = static_cast<uint8_t>(head_[1]);
  if (headNeed_ == 2) {
    // The whole header's size is known from its first two bytes.
    if (b1 & kMask) return fail("the upstream sent a masked frame (only clients mask)", out);
    const uint8_t len7 = b1 & 0x7f;
    headNeed_ = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0);
    if (head_.size() < headNeed_) return true;
  }
  if (b0 & kRsv) {
    return fail("reserved bits set, and no extension was negotiated to give them a meaning", out);
  }
  fin_ = (b0 & kFin) != 0;
  opcode_ = b0 & 0x0f;
  const uint8_t len7 = b1 & 0x7f;
  if (len7 < 126) {
    remaining_ = len7;
  } else {
    remaining_ = 0;
    for (size_t i = 2; i < headNeed_; ++i) {
      remaining_ = (remaining_ << 8) | static_cast<uint8_t>(head_[i]);
    }
    if (len7 == 127 && (remaining_ >> 63) != 0) {
      return fail("a 64-bit frame length with its most significant bit set", out);
    }
  }
  switch (opcode_) {
    case kContinuation:
      if (!message_) return fail("a continuation frame outside a fragmented message", out);
      break;
    case kText:
    case kBinary:
      if (message_) return fail("a new message inside a fragmented one", out);
      message_.emplace(set_);
      messageOpcode_ = opcode_;
      messageStarted_ = false;
      break;
    case kClose:
    case kPing:
    case kPong:
      if (!fin_) return fail("a fragmented control frame", out);
      if (remaining_ > kMaxControlPayload) {
        return fail(fmt::format("a control frame of {} bytes (at most 125)", remaining_), out);
      }
      control_.clear();
      break;
    default:
      return fail(fmt::format("unknown opcode {:#x}", opcode_), out);
  }
  inFrame_ = true;
  head_.clear();
  headNeed_ = 2;
  if (remaining_ == 0) endFrame(out);
  return true;
}

void WebsocketScrubber::endFrame(std::string& out) {
  inFrame_ = false;
  if (!isControl(opcode_)) {
    if (!fin_) return;
    message_->finish(pending_);
    count(*message_);
    message_.reset();
    flushMessage(true, out);
    return;
  }
  // A control frame may come between fragments: what the message let out goes first.
  if (message_) flushMessage(false, out);
  // A Close frame's status code is not text: only its reason is scrubbed.
  const size_t keep = opcode_ == kClose ? std::min<size_t>(2, control_.size()) : 0;
  std::string payload = control_.substr(0, keep);
  broker::Scrubber s(set_);
  s.feed(std::string_view(control_).substr(keep), payload);
  s.finish(payload);
  count(s);
  broker::wipe(control_);
  // A longer replacement (a redaction marker) could overflow the 125 bytes: the end is cut
  // (a cut after scrubbing cannot make a secret appear), at a character boundary for a reason.
  if (payload.size() > kMaxControlPayload) {
    payload.resize(opcode_ == kClose ? keep + utf8Prefix(std::string_view(payload).substr(keep),
                                                         kMaxControlPayload - keep)
                                     : kMaxControlPayload);
  }
  appendFrame(true, opcode_, payload, out);
}

bool WebsocketScrubber::feed(std::string_view in, std::string& out) {
  if (failed_) return false;
  while (!in.empty()) {
    if (!inFrame_) {
      const size_t take = std::min(in.size(), headNeed_ - head_.size());
      head_.append(in.substr(0, take));
      in.remove_prefix(take);
      if (head_.size() < headNeed_) continue;
      if (!startFrame(out)) return false;
      continue;
    }
    const size_t take = static_cast<size_t>(std::min<uint64_t>(in.size(), remaining_));
    const std::string_view part = in.substr(0, take);
    in.remove_prefix(take);
    remaining_ -= take;
    if (isControl(opcode_)) {
      control_.append(part);
    } else {
      message_->feed(part, pending_);
    }
    if (remaining_ == 0) endFrame(out);
  }
  // What this read let out of the message goes now, as a fragment: nothing waits for more
  // input but the scrubber's own tail.
  if (message_) flushMessage(false, out);
  return true;
}

std::string selectedWebsocketExtensions(const boost::beast::http::fields& res) {
  std::string out;
  for (const auto& f : res) {
    if (!boost::beast::iequals(f.name_string(), "sec-websocket-extensions")) continue;
    if (!out.empty()) out += ", ";
    out.append(f.value());
  }
  return out;
}

Refusal websocketExtensionRefusal(std::string_view extensions, std::string task, std::string host,
                                  std::string rule) {
  return Refusal{.status = 502,
                 .reason = reason::kWebsocketExtensionSelected,
                 .task = std::move(task),
                 .host = std::move(host),
                 .rule = std::move(rule),
                 .detail = fmt::format("the upstream's 101 selects the WebSocket extension {}, "
                                       "which sandgate did not offer: its frames could not be "
                                       "scrubbed",
                                       extensions),
                 .hint = "the upstream must not select an extension the request did not offer",
                 .outcome = Outcome::kError};
}

boost::asio::awaitable<TunnelResult> relayWebsocket(
    TlsChannel& client, boost::beast::flat_buffer& clientEarly, TlsChannel& upstream,
    boost::beast::flat_buffer& upstreamEarly, std::chrono::steady_clock::duration idleTimeout,
    std::shared_ptr<const broker::ScrubSet> set, TaskMetrics* metrics) {
  if (!set || set->empty()) {
    co_return co_await relayTls(client, clientEarly, upstream, upstreamEarly, idleTimeout);
  }
  WebsocketScrubber frames(std::move(set));
  TunnelResult r =
      co_await relayTls(client, clientEarly, upstream, upstreamEarly, idleTimeout, &frames);
  if (metrics) {
    for (const auto& [credential, n] : frames.countByCredential()) {
      metrics->secretScrubs(credential, n);
    }
  }
  co_return r;
}

}  // namespace sandgate::proxy
