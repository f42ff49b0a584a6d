// The WebSocket frame scrubber (proxy/intercept/websocket_relay.h): the upstream's frames come
// out with their payloads scrubbed and their lengths rewritten, whatever the reads' boundaries,
// messages reassemble to what they were with the placeholder for the secret, and a frame a
// server may not send ends the stream with a Close 1002.
#include "proxy/intercept/websocket_relay.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/encoding.h"

namespace sandgate::proxy {
namespace {

const std::string kSecret = "sk-live-4f9Q2xZ7wPq";
const std::string kPlaceholder = "sk-live-PHcde000111";
// Longer than the secret: frames grow.
const std::string kMarker = broker::redactionMarker("a-credential-with-a-long-name");

std::shared_ptr<const broker::ScrubSet> secretSet(std::string replacement = kPlaceholder) {
  std::vector<broker::ScrubRule> rules;
  rules.push_back({broker::Secret::copyOf(kSecret), std::move(replacement), "api"});
  return std::make_shared<const broker::ScrubSet>(std::move(rules));
}

// A frame as a server (or, masked, a client) writes it; `lenBytes` forces a length encoding
// (0: the shortest).
std::string frame(bool fin, uint8_t opcode, std::string_view payload, bool masked = false,
                  int lenBytes = 0, uint8_t rsv = 0) {
  std::string out;
  out += static_cast<char>((fin ? 0x80 : 0) | rsv | opcode);
  const uint64_t n = payload.size();
  const char mask = masked ? static_cast<char>(0x80) : 0;
  if (lenBytes == 0) lenBytes = n <= 125 ? 1 : n <= 0xffff ? 2 : 8;
  if (lenBytes == 1) {
    out += static_cast<char>(mask | n);
  } else if (lenBytes == 2) {
    out += static_cast<char>(mask | 126);
    out += static_cast<char>(n >> 8);
    out += static_cast<char>(n & 0xff);
  } else {
    out += static_cast<char>(mask | 127);
    for (int s = 56; s >= 0; s -= 8) out += static_cast<char>((n >> s) & 0xff);
  }
  const char key[4] = {0x11, 0x22, 0x33, 0x44};
  if (masked) out.append(key, 4);
  for (size_t i = 0; i < n; ++i)
    out += masked ? static_cast<char>(payload[i] ^ key[i % 4]) : payload[i];
  return out;
}

struct Message {
  uint8_t opcode;
  std::string payload;
  bool operator==(const Message&) const = default;
};

// Parses what went to the client: unmasked frames only, fragments joined into messages (a
// control frame between fragments is listed where it came). Fails the test on a malformed
// stream; `frames` counts the frames.
std::vector<Message> parse(std::string_view s, size_t* frames = nullptr, bool allowOpen = false) {
  std::vector<Message> out;
  std::optional<Message> open;
  size_t count = 0;
  while (!s.empty()) {
    EXPECT_GE(s.size(), 2u);
    if (s.size() < 2) break;
    const auto b0 = static_cast<uint8_t>(s[0]), b1 = static_cast<uint8_t>(s[1]);
    EXPECT_EQ(b1 & 0x80, 0) << "a masked frame to the client";
    EXPECT_EQ(b0 & 0x70, 0) << "reserved bits";
    uint64_t n = b1 & 0x7f;
    size_t head = 2;
    if (n == 126) {
      n = (uint64_t(uint8_t(s[2])) << 8) | uint8_t(s[3]);
      EXPECT_GT(n, 125u) << "not the shortest length";
      head = 4;
    } else if (n == 127) {
      n = 0;
      for (size_t i = 2; i < 10; ++i) n = (n << 8) | uint8_t(s[i]);
      EXPECT_GT(n, 0xffffu) << "not the shortest length";
      head = 10;
    }
    EXPECT_GE(s.size(), head + n);
    if (s.size() < head + n) break;
    const std::string payload(s.substr(head, n));
    s.remove_prefix(head + n);
    ++count;
    const uint8_t op = b0 & 0x0f;
    const bool fin = b0 & 0x80;
    if (op & 0x8) {
      EXPECT_TRUE(fin);
      EXPECT_LE(n, 125u);
      out.push_back({op, payload});
      continue;
    }
    if (op == 0) {
      EXPECT_TRUE(open.has_value()) << "a continuation out of place";
      if (!open) break;
      open->payload += payload;
    } else {
      EXPECT_FALSE(open.has_value()) << "a new message inside another";
      open = Message{op, payload};
    }
    if (fin) {
      out.push_back(*open);
      open.reset();
    }
  }
  if (!allowOpen) {
    EXPECT_FALSE(open.has_value()) << "a message left open";
  }
  if (frames) *frames = count;
  return out;
}

std::string feedAll(WebsocketScrubber& w, const std::vector<std::string_view>& parts,
                    bool* ok = nullptr) {
  std::string out;
  bool good = true;
  for (auto part : parts) {
    good = w.feed(part, out);
    if (!good) break;
  }
  if (ok) *ok = good;
  return out;
}

std::string replaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) {
    s.replace(p, from.size(), to);
  }
  return s;
}

// The stream fed whole and split in two at every position (or at `splits`) gives the same
// messages, never the secret, and the replacements are counted.
void expectScrubbed(const std::string& in, const std::vector<Message>& want,
                    const std::string& replacement = kPlaceholder,
                    std::vector<size_t> splits = {}) {
  if (splits.empty()) {
    for (size_t i = 0; i <= in.size(); ++i) splits.push_back(i);
  }
  for (size_t i : splits) {
    WebsocketScrubber w(secretSet(replacement));
    const std::string_view v(in);
    const std::string out = feedAll(w, {v.substr(0, i), v.substr(i)});
    ASSERT_EQ(parse(out), want) << "split at " << i;
    ASSERT_EQ(out.find(kSecret), std::string::npos) << "split at " << i;
    ASSERT_GE(w.countByCredential().at("api"), 1u);
  }
}

TEST(WebsocketScrubber, TextAndBinaryFrames) {
  const std::string text = "{\"echo\":\"Bearer " + kSecret + "\"}";
  const std::string bin = std::string("\x00\x01\xff", 3) + kSecret + std::string("\x80", 1);
  const std::string in = frame(true, 0x1, text) + frame(true, 0x2, bin);
  expectScrubbed(in, {{0x1, replaceAll(text, kSecret, kPlaceholder)},
                      {0x2, replaceAll(bin, kSecret, kPlaceholder)}});
}

TEST(WebsocketScrubber, ASecretSplitAcrossFragments) {
  const std::string msg = "token=" + kSecret + ";again=" + kSecret;
  // Cut inside both secrets, and an empty fragment between.
  const std::string in = frame(false, 0x1, msg.substr(0, 10)) + frame(false, 0x0, "") +
                         frame(false, 0x0, msg.substr(10, 20)) + frame(true, 0x0, msg.substr(30));
  expectScrubbed(in, {{0x1, replaceAll(msg, kSecret, kPlaceholder)}});
  // Split one byte a frame, binary.
  std::string bytes = frame(false, 0x2, msg.substr(0, 1));
  for (size_t i = 1; i + 1 < msg.size(); ++i) bytes += frame(false, 0x0, msg.substr(i, 1));
  bytes += frame(true, 0x0, msg.substr(msg.size() - 1));
  expectScrubbed(bytes, {{0x2, replaceAll(msg, kSecret, kPlaceholder)}});
}

// 16- and 64-bit lengths in, and a redaction marker (longer than the secret) makes the frames
// longer: the lengths out are the new ones, in the shortest encoding.
TEST(WebsocketScrubber, LongFramesAndLengthsRewritten) {
  const std::string mid = std::string(200, 'a') + kSecret + std::string(100, 'b');
  const std::string big = std::string(70000, 'c') + kSecret + "d";
  const std::string& marker = kMarker;
  const std::string in = frame(true, 0x1, mid) + frame(true, 0x2, big) +
                         frame(true, 0x1, "short " + kSecret, false, 8);  // 64-bit for 25 bytes
  // Every split in the headers and around each secret; every 997th byte elsewhere.
  std::vector<size_t> splits;
  for (size_t i = 0; i <= in.size(); ++i) {
    bool near = i % 997 == 0 || i + 12 > in.size();
    for (size_t p = in.find(kSecret); p != std::string::npos; p = in.find(kSecret, p + 1)) {
      near = near || (i + 16 > p && i < p + kSecret.size() + 16);
    }
    for (size_t h : {size_t{0}, 4 + mid.size(), 4 + mid.size() + 10 + big.size()}) {
      near = near || (i >= h && i <= h + 12);
    }
    if (near) splits.push_back(i);
  }
  expectScrubbed(in,
                 {{0x1, replaceAll(mid, kSecret, marker)},
                  {0x2, replaceAll(big, kSecret, marker)},
                  {0x1, "short " + marker}},
                 marker, splits);
  // A 125-byte text frame that grows past 125 bytes takes the 16-bit length.
  const std::string edge = std::string(125 - kSecret.size(), 'e') + kSecret;
  WebsocketScrubber w(secretSet(marker));
  const std::string out = feedAll(w, {frame(true, 0x1, edge)});
  ASSERT_GT(out.size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>(out[1]), 126);
  EXPECT_EQ(parse(out), (std::vector<Message>{{0x1, replaceAll(edge, kSecret, marker)}}));
}

// Control frames pass as they are, payload scrubbed: a Ping between two fragments of a message
// whose secret it splits, a Pong, a Close whose reason holds the secret (the status code kept).
TEST(WebsocketScrubber, ControlFrames) {
  const std::string msg = "a" + kSecret + "z";
  const std::string close = std::string("\x03\xe8", 2) + "bye " + kSecret;
  const std::string in = frame(false, 0x1, msg.substr(0, 8)) + frame(true, 0x9, "ping " + kSecret) +
                         frame(true, 0x0, msg.substr(8)) + frame(true, 0xa, kSecret) +
                         frame(true, 0x8, close);
  expectScrubbed(in, {{0x9, "ping " + kPlaceholder},
                      {0x1, replaceAll(msg, kSecret, kPlaceholder)},
                      {0xa, kPlaceholder},
                      {0x8, std::string("\x03\xe8", 2) + "bye " + kPlaceholder}});
}

// A control payload the marker would take past 125 bytes is cut to 125.
TEST(WebsocketScrubber, ControlFrameKeptWithin125Bytes) {
  const std::string marker = "[REDACTED:" + std::string(60, 'm') + "]";
  const std::string ping = std::string(100, 'p') + kSecret;
  WebsocketScrubber w(secretSet(marker));
  const auto got = parse(feedAll(w, {frame(true, 0x9, ping)}));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload.size(), 125u);
  EXPECT_EQ(got[0].payload, (std::string(100, 'p') + marker).substr(0, 125));
}

// Encoded forms are scrubbed in frames as in bodies.
TEST(WebsocketScrubber, EncodedFormsInFrames) {
  const std::string b64 = "{\"t\":\"" + base64Encode("x" + kSecret) + "\"}";
  const std::string want = "{\"t\":\"" + base64Encode("x" + kPlaceholder) + "\"}";
  expectScrubbed(frame(false, 0x1, b64.substr(0, 12)) + frame(true, 0x0, b64.substr(12)),
                 {{0x1, want}});
}

// Frames a server may not send end the stream: what came before goes out, then Close 1002.
TEST(WebsocketScrubber, ProtocolErrors) {
  const struct {
    const char* name;
    std::string bad;
    const char* error;
  } cases[] = {
      {"masked", frame(true, 0x1, "hello " + kSecret, true), "masked"},
      {"rsv1_without_extension", frame(true, 0x1, "x", false, 0, 0x40), "reserved bits"},
      {"unknown_opcode", frame(true, 0x3, "x"), "opcode"},
      {"continuation_first", frame(true, 0x0, "x"), "continuation"},
      {"control_too_long", frame(true, 0x9, std::string(126, 'p')), "125"},
      {"fragmented_control", frame(false, 0x9, "p"), "fragmented control"},
      {"new_message_inside_one", frame(false, 0x1, "a") + frame(true, 0x2, "b"), "inside"},
      {"length_top_bit", std::string("\x81\x7f\x80\x00\x00\x00\x00\x00\x00\x01", 10), "64-bit"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string good = frame(true, 0x1, "fine");
    const std::string in = good + c.bad + frame(true, 0x1, "after");
    for (size_t i = 0; i <= in.size(); ++i) {
      WebsocketScrubber w(secretSet());
      const std::string_view v(in);
      bool ok = true;
      const std::string out = feedAll(w, {v.substr(0, i), v.substr(i)}, &ok);
      ASSERT_FALSE(ok) << "split at " << i;
      EXPECT_NE(w.error().find(c.error), std::string::npos) << w.error();
      // A Close may cut a fragmented message: the connection ends with it.
      const auto got = parse(out, nullptr, true);
      ASSERT_GE(got.size(), 2u) << "split at " << i;
      EXPECT_EQ(got.front(), (Message{0x1, "fine"}));
      EXPECT_EQ(got.back(), (Message{0x8, std::string("\x03\xea", 2)}));
      EXPECT_EQ(out.find(kSecret), std::string::npos);
      // Nothing after the error is relayed.
      std::string more;
      EXPECT_FALSE(w.feed(frame(true, 0x1, "later"), more));
      EXPECT_TRUE(more.empty());
    }
  }
}

// Random messages, fragmentations and read boundaries: the messages come out whole, with the
// placeholder for every secret, and never the secret.
TEST(WebsocketScrubber, RandomFragmentsAndReads) {
  std::mt19937 rng(6455);
  for (int round = 0; round < 300; ++round) {
    std::string in;
    std::vector<Message> want;
    for (int m = 0; m < 3; ++m) {
      std::string msg;
      for (int k = 0; k < 3; ++k) msg += std::string(rng() % 40, 'a' + k) + kSecret;
      const uint8_t op = rng() % 2 ? 0x1 : 0x2;
      size_t pos = 0;
      bool first = true;
      while (pos < msg.size()) {
        size_t n = std::min<size_t>(msg.size() - pos, 1 + rng() % 30);
        const bool fin = pos + n == msg.size();
        in += frame(fin, first ? op : 0x0, msg.substr(pos, n), false, rng() % 3 == 0 ? 2 : 0);
        if (!fin && rng() % 5 == 0) in += frame(true, 0x9, "p");
        first = false;
        pos += n;
      }
      want.push_back({op, replaceAll(msg, kSecret, kPlaceholder)});
    }
    std::vector<std::string_view> parts;
    for (size_t pos = 0; pos < in.size();) {
      size_t n = std::min<size_t>(in.size() - pos, rng() % 50);
      parts.push_back(std::string_view(in).substr(pos, n));
      pos += n;
    }
    WebsocketScrubber w(secretSet());
    const std::string out = feedAll(w, parts);
    ASSERT_EQ(out.find(kSecret), std::string::npos);
    std::vector<Message> data;
    for (auto& m : parse(out)) {
      if (m.opcode != 0x9) data.push_back(m);
    }
    ASSERT_EQ(data, want);
  }
}

}  // namespace
}  // namespace sandgate::proxy
