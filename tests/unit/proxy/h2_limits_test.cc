// The h2_* keys of `limits:` from the client's side, at the session: raw HTTP/2 frames a client
// sends, fed to an nghttp2 server session built as sandgate builds the client's session
// (proxy/h2/h2_limits.h), and the frames it answers with. A configured bound must hold where the
// built-in one would let the client through (the integration test ConfiguredH2LimitsTest shows
// the same through sandgate serve).
#include "proxy/h2/h2_limits.h"

#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <map>
#include <string>
#include <vector>

namespace sandgate::proxy {
namespace {

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr uint8_t kHeaders = 1, kRst = 3, kSettings = 4, kGoaway = 7, kCont = 9;
constexpr uint8_t kEndStream = 1, kEndHeaders = 4;

std::string frame(uint8_t type, uint8_t flags, uint32_t sid, const std::string& payload) {
  std::string f;
  const size_t n = payload.size();
  f += static_cast<char>(n >> 16);
  f += static_cast<char>(n >> 8);
  f += static_cast<char>(n);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  for (int shift : {24, 16, 8, 0}) f += static_cast<char>((sid >> shift) & 0xff);
  return f + payload;
}

// HPACK literals without indexing or Huffman (each name and value under 127 bytes).
std::string literal(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    out += '\0';
    out += static_cast<char>(name.size());
    out += name;
    out += static_cast<char>(value.size());
    out += value;
  }
  return out;
}

std::string get(const std::string& path) {
  return literal(
      {{":method", "GET"}, {":scheme", "https"}, {":authority", "api.test"}, {":path", path}});
}

struct Frame {
  uint8_t type;
  uint32_t sid;
  std::string payload;
};

// A client's bytes to the client's session as sandgate builds it, and what comes back.
class ClientSession {
 public:
  explicit ClientSession(const config::EffectiveLimits& limits) {
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_option* opt = nullptr;
    EXPECT_EQ(nghttp2_session_callbacks_new(&cbs), 0);
    EXPECT_EQ(nghttp2_option_new(&opt), 0);
    nghttp2_session_callbacks_set_on_begin_headers_callback(
        cbs, [](nghttp2_session*, const nghttp2_frame* f, void* p) {
          if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
            static_cast<ClientSession*>(p)->began.push_back(f->hd.stream_id);
          }
          return 0;
        });
    nghttp2_session_callbacks_set_on_frame_recv_callback(
        cbs, [](nghttp2_session*, const nghttp2_frame* f, void* p) {
          if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
            static_cast<ClientSession*>(p)->heads.push_back(f->hd.stream_id);
          }
          return 0;
        });
    applyH2ClientLimits(opt, limits);
    EXPECT_EQ(nghttp2_session_server_new2(&session_, cbs, this, opt), 0);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    const auto settings = h2ClientSettings(limits, NGHTTP2_INITIAL_WINDOW_SIZE);
    EXPECT_EQ(
        nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size()), 0);
  }
  ~ClientSession() { nghttp2_session_del(session_); }

  // Feeds the client's bytes (the preface first): false when the session ended the connection.
  bool send(const std::string& frames) {
    const std::string in = std::string(kPreface) + frames;
    const auto rv =
        nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(in.data()), in.size());
    drain();
    return rv >= 0;
  }
  // What the session sent back, frame by frame.
  std::vector<Frame> answers() const {
    std::vector<Frame> out;
    for (size_t at = 0; at + 9 <= out_.size();) {
      const auto b = [&](size_t i) { return static_cast<uint8_t>(out_[at + i]); };
      const size_t len = (b(0) << 16) | (b(1) << 8) | b(2);
      const uint32_t sid = ((b(5) & 0x7fu) << 24) | (b(6) << 16) | (b(7) << 8) | b(8);
      out.push_back({b(3), sid, out_.substr(at + 9, len)});
      at += 9 + len;
    }
    return out;
  }
  std::vector<int32_t> began;  // streams whose request head began
  std::vector<int32_t> heads;  // and whose head was received whole

 private:
  void drain() {
    const uint8_t* data = nullptr;
    for (ssize_t n; (n = nghttp2_session_mem_send(session_, &data)) > 0;) {
      out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
  }
  nghttp2_session* session_ = nullptr;
  std::string out_;
};

// RST_STREAM error codes by stream.
std::map<uint32_t, uint32_t> resets(const std::vector<Frame>& frames) {
  std::map<uint32_t, uint32_t> out;
  for (const auto& f : frames) {
    if (f.type == kRst && f.payload.size() == 4) {
      const auto* p = reinterpret_cast<const uint8_t*>(f.payload.data());
      out[f.sid] = (uint32_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
    }
  }
  return out;
}

bool goaway(const std::vector<Frame>& frames) {
  for (const auto& f : frames) {
    if (f.type == kGoaway) return true;
  }
  return false;
}

std::string fiveOpenStreams() {
  std::string out = frame(kSettings, 0, 0, "");
  for (uint32_t i = 0; i < 5; ++i) {
    out += frame(kHeaders, kEndHeaders, 2 * i + 1, get("/s" + std::to_string(i)));
  }
  return out;
}

TEST(H2Limits, TheStreamPastTheConfiguredCountIsRefused) {
  config::EffectiveLimits limits;
  limits.h2MaxConcurrentStreams = 4;
  ClientSession s(limits);
  ASSERT_TRUE(s.send(fiveOpenStreams()));
  EXPECT_EQ(s.began, (std::vector<int32_t>{1, 3, 5, 7}));
  const auto r = resets(s.answers());
  ASSERT_EQ(r.count(9), 1u) << "the fifth stream was not refused";
  EXPECT_EQ(r.at(9), uint32_t{NGHTTP2_REFUSED_STREAM});
  EXPECT_EQ(r.size(), 1u);
}

TEST(H2Limits, TheDefaultLetsFiveStreamsOpen) {
  ClientSession s(config::EffectiveLimits{});
  ASSERT_TRUE(s.send(fiveOpenStreams()));
  EXPECT_EQ(s.began.size(), 5u);
  EXPECT_TRUE(resets(s.answers()).empty());
}

std::string continued(int continuations) {
  const std::string block = get("/c");
  const size_t piece = block.size() / (continuations + 1);
  std::string out = frame(kSettings, 0, 0, "");
  out += frame(kHeaders, kEndStream, 1, block.substr(0, piece));
  for (int i = 1; i <= continuations; ++i) {
    const bool last = i == continuations;
    out += frame(kCont, last ? kEndHeaders : 0, 1,
                 last ? block.substr(i * piece) : block.substr(i * piece, piece));
  }
  return out;
}

TEST(H2Limits, ContinuationsPastTheConfiguredCountEndTheConnection) {
  config::EffectiveLimits limits;
  limits.h2MaxContinuations = 2;
  {
    ClientSession s(limits);
    EXPECT_TRUE(s.send(continued(2)));
    EXPECT_EQ(s.heads.size(), 1u);
  }
  ClientSession s(limits);
  EXPECT_FALSE(s.send(continued(3)));
  EXPECT_TRUE(s.heads.empty()) << "a head of 3 CONTINUATIONs was taken";
  ClientSession byDefault{config::EffectiveLimits{}};
  EXPECT_TRUE(byDefault.send(continued(3)));
}

std::string rapidResets(int count) {
  std::string out = frame(kSettings, 0, 0, "");
  for (int i = 0; i < count; ++i) {
    const uint32_t sid = 2 * i + 1;
    out += frame(kHeaders, kEndHeaders, sid, get("/r"));
    out += frame(kRst, 0, sid, std::string("\0\0\0\x08", 4));
  }
  return out;
}

TEST(H2Limits, ResetsPastTheConfiguredBurstGetGoaway) {
  config::EffectiveLimits limits;
  limits.h2ResetBurst = 5;
  limits.h2ResetsPerSecond = 1;
  ClientSession s(limits);
  s.send(rapidResets(20));
  EXPECT_TRUE(goaway(s.answers())) << "20 resets against a burst of 5 ended nothing";
  ClientSession byDefault{config::EffectiveLimits{}};
  byDefault.send(rapidResets(20));
  EXPECT_FALSE(goaway(byDefault.answers()));
}

TEST(H2Limits, TheSettingsSentCarryTheConfiguredBounds) {
  config::EffectiveLimits limits;
  limits.h2MaxConcurrentStreams = 7;
  limits.maxHeaderBytes = 4096;
  const auto settings = h2ClientSettings(limits, 1000);
  std::map<int32_t, uint32_t> byId;
  for (const auto& e : settings) byId[e.settings_id] = e.value;
  EXPECT_EQ(byId[NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS], 7u);
  EXPECT_EQ(byId[NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE], 4096u);
  EXPECT_EQ(byId[NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE], 1000u);
}

}  // namespace
}  // namespace sandgate::proxy
