// Fuzzes sandgate's HTTP/2 stream handling (proxy/h2: H2Streams, its nghttp2 callbacks and
// H2Request) end to end in memory: the bytes a client sends after the connection preface go
// to the client's session made exactly as an interception makes it (H2Streams::
// newClientSession: the callbacks, the task's h2 limits, the SETTINGS), in chunks, with what
// each session queues moved in between; the requests sandgate judges go out on its upstream
// session (newUpstreamSession) to a fake upstream, an nghttp2 server session here, which
// answers each with a response whose header, DATA and trailers carry the task's secret.
//
// The connection is a real ClientConnection on a snapshot built from the YAML below the way
// the server builds one (config::loadString, buildSnapshot): task `t` may GET and POST
// https://api.test/ok/* with credential `api` (its secret known here), not /ok/private*.
//
// Input: byte 0 is the client's chunk size (1..128, or 4 KiB when its top bit is set); byte 1
// the response's shape (kSecretInHeader...); byte 2 where the fake upstream splits its DATA
// (1..256 bytes a frame); the rest, the client's frames.
//
// Properties, beyond not crashing or leaking (ASan in the replay, tests/unit/proxy):
//  - the secret never appears in what the client's session sends: no header or trailer field,
//    no stream's DATA (joined across frames), no raw byte run;
//  - every request that reaches the upstream is one the policy allows (its method and path
//    decided again here), names the CONNECT target in :authority, and carries the injected
//    Authorization exactly once;
//  - no more client streams are open than the task's h2_max_concurrent_streams;
//  - what sandgate's upstream session sends is HTTP/2 the fake upstream accepts.
#include <nghttp2/nghttp2.h>
#include <stdlib.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "fuzz/check.h"
#include "policy/host.h"
#include "proxy/client/client_connection.h"
#include "proxy/h2/h2_stream.h"
#include "proxy/state/server_context.h"
#include "proxy/state/snapshot.h"

namespace {

using namespace sandgate;
using proxy::ClientConnection;

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr std::string_view kSecret = "sk-h2fuzz-7f3a9c2e5b1d4086e9a7";
constexpr std::string_view kAuthority = "api.test";

constexpr uint8_t kSecretInHeader = 0x01;
constexpr uint8_t kSecretInBody = 0x02;
constexpr uint8_t kTrailers = 0x04;       // trailers, one carrying the secret
constexpr uint8_t kGrpc = 0x08;           // content-type application/grpc
constexpr uint8_t kUpstreamReset = 0x10;  // RST_STREAM instead of a response
constexpr uint8_t kNoBody = 0x20;         // the head ends the stream
constexpr uint8_t kAnswerAtHead = 0x40;   // answered when the head arrives, not the request's end
constexpr uint8_t kInformational = 0x80;  // a 103 before the final head

constexpr const char* kConfig = R"(credentials:
  api:
    source: { env: SANDGATE_H2FUZZ_SECRET }
    hosts: [api.test]
    inject: { header: Authorization, value: "Bearer {secret}" }
policies:
  api:
    allow:
      - host: api.test
        methods: [GET, POST]
        paths: ["/ok/*"]
        credential: api
    deny:
      - host: api.test
        paths: ["/ok/private*/**"]
tasks:
  - name: t
    policy: api
    limits:
      max_header_bytes: 8KiB
      h2_max_concurrent_streams: 4
      h2_reset_burst: 8
      h2_resets_per_second: 2
      h2_max_continuations: 2
)";

// What every input shares: the server's state with the snapshot, one worker, the target.
struct World {
  proxy::TaskRegistry registry;
  proxy::ServerState state;
  proxy::Worker worker;
  std::shared_ptr<const proxy::Snapshot> snap;
  std::shared_ptr<const proxy::ListenerInfo> listener;
  policy::Target target;

  World() {
    setenv("SANDGATE_H2FUZZ_SECRET", std::string(kSecret).c_str(), 1);
    auto cfg = config::loadString(kConfig, "h2fuzz.yaml");
    SANDGATE_FUZZ_CHECK(cfg.ok(), "the harness's config loads");
    auto built = proxy::buildSnapshot(std::move(cfg.value()), registry, 1);
    SANDGATE_FUZZ_CHECK(built.ok(), "the harness's snapshot builds");
    snap = built.value();
    state.snapshot.store(snap);
    auto l = std::make_shared<proxy::ListenerInfo>();
    l->name = "127.0.0.1:3128";
    listener = std::move(l);
    target.name = std::string(kAuthority);
    verbose = getenv("SANDGATE_H2FUZZ_VERBOSE") != nullptr;
  }
  bool verbose = false;  // the replay's test prints what each input did
};

World& world() {
  static World* w = new World();  // never destroyed: the secret store's threads may outlive main
  return *w;
}

std::string_view sv(const uint8_t* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

bool hasSecret(std::string_view s) { return s.find(kSecret) != std::string_view::npos; }

// Reads what the client's session sends as the client would: frame by frame, header blocks
// through HPACK, DATA joined per stream.
class ClientView {
 public:
  ClientView() { nghttp2_hd_inflate_new(&inflater_); }
  ~ClientView() { nghttp2_hd_inflate_del(inflater_); }
  ClientView(const ClientView&) = delete;
  ClientView& operator=(const ClientView&) = delete;

  size_t bytes() const { return total_; }

  void feed(std::string_view bytes) {
    total_ += bytes.size();
    all_.append(bytes);
    SANDGATE_FUZZ_CHECK(!hasSecret(all_), "the secret in the bytes sent to the client");
    if (all_.size() > 4096) all_.erase(0, all_.size() - kSecret.size());
    in_.append(bytes);
    size_t off = 0;
    while (!broken_ && in_.size() - off >= 9) {
      const auto* h = reinterpret_cast<const uint8_t*>(in_.data() + off);
      const size_t len = (size_t{h[0]} << 16) | (size_t{h[1]} << 8) | h[2];
      if (in_.size() - off < 9 + len) break;
      const uint8_t type = h[3], flags = h[4];
      const int32_t id =
          static_cast<int32_t>(((h[5] & 0x7fu) << 24) | (h[6] << 16) | (h[7] << 8) | h[8]);
      frame(type, flags, id, std::string_view(in_.data() + off + 9, len));
      off += 9 + len;
    }
    in_.erase(0, off);
  }

 private:
  void frame(uint8_t type, uint8_t flags, int32_t id, std::string_view payload) {
    if (type == NGHTTP2_DATA) {
      if (flags & NGHTTP2_FLAG_PADDED) {
        const size_t pad = payload.empty() ? 0 : static_cast<uint8_t>(payload[0]);
        payload = payload.size() > pad ? payload.substr(1, payload.size() - 1 - pad) : "";
      }
      std::string& body = bodies_[id];
      body.append(payload);
      SANDGATE_FUZZ_CHECK(!hasSecret(body), "the secret in a response body");
      if (body.size() > 4096) body.erase(0, body.size() - kSecret.size());
    } else if (type == NGHTTP2_HEADERS || type == NGHTTP2_CONTINUATION) {
      if (type == NGHTTP2_HEADERS) {
        if (flags & NGHTTP2_FLAG_PADDED) broken_ = true;  // sandgate never pads
        if (flags & NGHTTP2_FLAG_PRIORITY)
          payload.remove_prefix(std::min<size_t>(5, payload.size()));
      }
      block_.append(payload);
      if (flags & NGHTTP2_FLAG_END_HEADERS) inflate();
    }
  }

  void inflate() {
    auto* in = reinterpret_cast<const uint8_t*>(block_.data());
    size_t left = block_.size();
    for (;;) {
      nghttp2_nv nv;
      int flags = 0;
      const ssize_t n = nghttp2_hd_inflate_hd2(inflater_, &nv, &flags, in, left, 1);
      SANDGATE_FUZZ_CHECK(n >= 0, "a header block sent to the client does not decode");
      in += n;
      left -= static_cast<size_t>(n);
      if (flags & NGHTTP2_HD_INFLATE_EMIT) {
        SANDGATE_FUZZ_CHECK(
            !hasSecret(sv(nv.name, nv.namelen)) && !hasSecret(sv(nv.value, nv.valuelen)),
            "the secret in a header or trailer field sent to the client");
      }
      if (flags & NGHTTP2_HD_INFLATE_FINAL) {
        nghttp2_hd_inflate_end_headers(inflater_);
        break;
      }
      if (n == 0 && left == 0) break;
    }
    block_.clear();
  }

  nghttp2_hd_inflater* inflater_ = nullptr;
  std::string in_, all_, block_;
  std::map<int32_t, std::string> bodies_;
  bool broken_ = false;
  size_t total_ = 0;
};

// The fake upstream: an nghttp2 server session that checks each request and answers it.
struct FakeStream {
  std::vector<std::pair<std::string, std::string>> fields;
  std::string body;
  size_t sent = 0;
  bool answered = false;
};

class Harness : public proxy::H2Streams {
 public:
  Harness(ClientConnection& c, const policy::Target& target, uint8_t shape, size_t split)
      : H2Streams(c, target, 443), shape_(shape), split_(split) {}
  ~Harness() override {
    if (world().verbose) {
      std::printf("  %d requests reached the upstream, %d answered, %zu bytes to the client\n",
                  reached_, answered_, view_.bytes());
    }
    finishAll("the input ended");
    if (client_) nghttp2_session_del(client_);
    if (up_) nghttp2_session_del(up_);
    if (fake_) nghttp2_session_del(fake_);
  }

  bool start() {
    if (newClientSession(&client_) != 0 || newUpstreamSession(&up_) != 0) return false;
    nghttp2_session_callbacks* cbs = nullptr;
    if (nghttp2_session_callbacks_new(&cbs) != 0) return false;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, &Harness::fakeBegin);
    nghttp2_session_callbacks_set_on_header_callback(cbs, &Harness::fakeHeader);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &Harness::fakeFrame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &Harness::fakeClose);
    const int rv = nghttp2_session_server_new(&fake_, cbs, this);
    nghttp2_session_callbacks_del(cbs);
    if (rv != 0) return false;
    const nghttp2_settings_entry s[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100}};
    return nghttp2_submit_settings(fake_, NGHTTP2_FLAG_NONE, s, 1) == 0;
  }

  // Feeds the client's bytes, `chunk` at a time, moving what every session queues in between.
  void run(std::string_view in, size_t chunk) {
    for (size_t off = 0; off < in.size() && !clientDone_;) {
      const size_t n = std::min(chunk, in.size() - off);
      const ssize_t rv =
          nghttp2_session_mem_recv(client_, reinterpret_cast<const uint8_t*>(in.data() + off), n);
      checkStreams();
      if (rv < 0) {
        // As H2Proxy::clientFailed: GOAWAY, and nothing more is read from this client.
        nghttp2_session_terminate_session(client_, NGHTTP2_PROTOCOL_ERROR);
        clientDone_ = true;
      }
      off += n;
      pump();
    }
    pump();
  }

 private:
  nghttp2_session* clientSession() override { return client_; }
  nghttp2_session* upstreamSession() override { return up_; }
  const std::string& upstreamAddress() const override { return address_; }
  bool upstreamGone() const override { return upGone_; }

  void checkStreams() {
    SANDGATE_FUZZ_CHECK(openStreams() <= c_.limits().h2MaxConcurrentStreams,
                        "more client streams open than h2_max_concurrent_streams");
  }

  // As H2Proxy::upstreamEnded.
  void upstreamEnded(const std::string& why) {
    if (upGone_) return;
    upGone_ = true;
    failUpstreamStreams(why);
    nghttp2_submit_goaway(client_, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(client_), NGHTTP2_NO_ERROR,
                          nullptr, 0);
  }

  // Moves queued bytes between the sessions until none moves (bounded).
  void pump() {
    for (int round = 0; round < 256; ++round) {
      bool moved = false;
      const uint8_t* data = nullptr;
      for (ssize_t n; (n = nghttp2_session_mem_send(client_, &data)) > 0;) {
        view_.feed(sv(data, static_cast<size_t>(n)));
        moved = true;
      }
      if (!upGone_) {
        for (ssize_t n; (n = nghttp2_session_mem_send(up_, &data)) > 0;) {
          moved = true;
          const ssize_t rv = nghttp2_session_mem_recv(fake_, data, static_cast<size_t>(n));
          SANDGATE_FUZZ_CHECK(rv == n, "the upstream rejects what sandgate's session sent");
        }
        for (ssize_t n; (n = nghttp2_session_mem_send(fake_, &data)) > 0;) {
          moved = true;
          if (nghttp2_session_mem_recv(up_, data, static_cast<size_t>(n)) < 0) {
            upstreamEnded("the upstream broke HTTP/2");
            break;
          }
        }
      }
      checkStreams();
      if (!moved) break;
    }
  }

  static Harness& self(void* p) { return *static_cast<Harness*>(p); }

  static int fakeBegin(nghttp2_session*, const nghttp2_frame* f, void* p) {
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
      self(p).fakeStreams_[f->hd.stream_id] = std::make_unique<FakeStream>();
    }
    return 0;
  }
  static int fakeHeader(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name,
                        size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* p) {
    auto it = self(p).fakeStreams_.find(f->hd.stream_id);
    if (it == self(p).fakeStreams_.end() || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    it->second->fields.emplace_back(std::string(sv(name, namelen)),
                                    std::string(sv(value, valuelen)));
    return 0;
  }
  static int fakeFrame(nghttp2_session* session, const nghttp2_frame* f, void* p) {
    Harness& h = self(p);
    auto it = h.fakeStreams_.find(f->hd.stream_id);
    if (it == h.fakeStreams_.end()) return 0;
    FakeStream& s = *it->second;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
      h.checkRequest(s);
    }
    const bool end = f->hd.flags & NGHTTP2_FLAG_END_STREAM;
    if ((h.shape_ & kAnswerAtHead) || end) h.answer(session, f->hd.stream_id, s);
    return 0;
  }
  static int fakeClose(nghttp2_session*, int32_t id, uint32_t, void* p) {
    self(p).fakeStreams_.erase(id);
    return 0;
  }

  // A request that reached the upstream: allowed, bound to the target, credential once.
  void checkRequest(const FakeStream& s) {
    const std::string *method = nullptr, *path = nullptr, *authority = nullptr;
    int auth = 0;
    for (const auto& [n, v] : s.fields) {
      if (n == ":method") method = &v;
      if (n == ":path") path = &v;
      if (n == ":authority") authority = &v;
      if (n == "authorization") {
        ++auth;
        SANDGATE_FUZZ_CHECK(v == "Bearer " + std::string(kSecret),
                            "an Authorization upstream that is not the injected credential");
      } else {
        SANDGATE_FUZZ_CHECK(!hasSecret(v), "the secret upstream outside the injected field");
      }
    }
    SANDGATE_FUZZ_CHECK(auth == 1, "the injected credential not exactly once upstream");
    SANDGATE_FUZZ_CHECK(method && path && authority, "a request upstream without its head");
    SANDGATE_FUZZ_CHECK(policy::matchesTarget(*authority, target_, 443, 443),
                        "an :authority upstream other than the CONNECT target");
    const std::string_view p(*path);
    policy::Request req{.target = target_,
                        .port = 443,
                        .method = std::string_view(*method),
                        .path = p.substr(0, p.find('?')),
                        .overrideHeader = std::nullopt};
    SANDGATE_FUZZ_CHECK(proxy::decideRequest(c_, req).allowed(),
                        "a request upstream that the policy refuses");
    ++reached_;
  }

  void answer(nghttp2_session* session, int32_t id, FakeStream& s) {
    if (s.answered) return;
    s.answered = true;
    ++answered_;
    if (shape_ & kUpstreamReset) {
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
      return;
    }
    if (shape_ & kInformational) {
      const nghttp2_nv early[] = {field(":status", "103"), field("link", "</a>; rel=preload")};
      nghttp2_submit_headers(session, NGHTTP2_FLAG_NONE, id, nullptr, early, 2, nullptr);
    }
    const std::string secret(kSecret);
    if (shape_ & kGrpc) {
      // One length-prefixed message: a protobuf string field (1) holding the secret.
      const std::string message = std::string("\x0a") + static_cast<char>(secret.size()) + secret;
      s.body = std::string(4, '\0') + static_cast<char>(message.size()) + message;
    } else {
      s.body = "{\"echo\":\"" + secret + "\",\"more\":\"" + secret + "\"}";
    }
    if (!(shape_ & kSecretInBody)) std::replace(s.body.begin(), s.body.end(), 'k', 'q');
    std::vector<nghttp2_nv> head = {
        field(":status", "200"),
        field("content-type", (shape_ & kGrpc) ? "application/grpc" : "application/json")};
    const std::string length = std::to_string(s.body.size());
    if (!(shape_ & kNoBody)) head.push_back(field("content-length", length));
    if (shape_ & kSecretInHeader) head.push_back(field("x-echo", secret));
    nghttp2_data_provider body{};
    body.source.ptr = &s;
    body.read_callback = &Harness::readBody;
    nghttp2_submit_response(session, id, head.data(), head.size(),
                            (shape_ & kNoBody) ? nullptr : &body);
  }

  static ssize_t readBody(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length,
                          uint32_t* flags, nghttp2_data_source* src, void* p) {
    Harness& h = self(p);
    auto& s = *static_cast<FakeStream*>(src->ptr);
    const size_t n = std::min({length, h.split_, s.body.size() - s.sent});
    std::memcpy(buf, s.body.data() + s.sent, n);
    s.sent += n;
    if (s.sent == s.body.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (h.shape_ & kTrailers) {
        const std::string secret(kSecret);
        const nghttp2_nv t[] = {field("grpc-status", "0"), field("grpc-message", secret)};
        if (nghttp2_submit_trailer(session, id, t, 2) == 0) {
          *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        }
      }
    }
    return static_cast<ssize_t>(n);
  }

  static nghttp2_nv field(std::string_view n, std::string_view v) {
    return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                      reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                      NGHTTP2_NV_FLAG_NONE};
  }

  uint8_t shape_;
  size_t split_;
  nghttp2_session* client_ = nullptr;
  nghttp2_session* up_ = nullptr;
  nghttp2_session* fake_ = nullptr;
  std::string address_ = "192.0.2.1:443";
  bool upGone_ = false;
  bool clientDone_ = false;
  int reached_ = 0, answered_ = 0;
  ClientView view_;
  std::map<int32_t, std::unique_ptr<FakeStream>> fakeStreams_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  World& w = world();
  const size_t chunk = (data[0] & 0x80) ? 4096 : 1 + (data[0] & 0x7f);
  const uint8_t shape = data[1];
  const size_t split = 1 + size_t{data[2]};
  std::string in(kPreface);
  in.append(reinterpret_cast<const char*>(data + 3), size - 3);
  // The sandbox never holds the secret (THREATS.md): a client that sends it may get its own
  // bytes back (a refusal names its path), which is no leak. libFuzzer finds it by comparison.
  if (hasSecret(in)) return 0;

  ClientConnection c(w.worker, w.state, boost::asio::ip::tcp::socket(w.worker.io));
  c.snap = w.snap;
  c.listener = w.listener;
  c.client = "127.0.0.1:40000";
  c.task = w.snap->findTask("t");
  SANDGATE_FUZZ_CHECK(c.task, "the harness's task exists");
  {
    Harness h(c, w.target, shape, split);
    if (h.start()) h.run(in, chunk);
  }
  return 0;
}
