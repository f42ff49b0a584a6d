// The streams of one HTTP/2 interception: each client stream's request judged and sent upstream
// as a stream of the upstream connection, its response scrubbed on the way back, and its audit
// line written when it closes. The nghttp2 callbacks of both sessions land here; the connection
// driver (h2_proxy.cc) owns the sessions and the sockets. Internal to proxy/h2.
#pragma once

#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "config/config.h"
#include "policy/engine.h"
#include "proxy/client/refusal.h"

namespace sandgate::proxy {

struct ClientConnection;
class RequestCredentials;

// The window each stream gets on either leg (SETTINGS_INITIAL_WINDOW_SIZE): what a peer can make
// sandgate hold for one stream.
inline constexpr int32_t kH2StreamWindow = NGHTTP2_INITIAL_WINDOW_SIZE;  // 65535
// The connection-level window sandgate gives each leg's peer.
inline constexpr int32_t kH2ConnectionWindow = 1024 * 1024;
struct H2Callbacks;
struct H2Stream;

class H2Streams {
 public:
  H2Streams(ClientConnection& c, const policy::Target& target, uint16_t port);
  virtual ~H2Streams();
  H2Streams(const H2Streams&) = delete;
  H2Streams& operator=(const H2Streams&) = delete;

 protected:
  virtual nghttp2_session* clientSession() = 0;
  virtual nghttp2_session* upstreamSession() = 0;
  virtual const std::string& upstreamAddress() const = 0;
  // The upstream connection has ended: new streams are refused (upstream_reset).
  virtual bool upstreamGone() const = 0;

  void installClientCallbacks(nghttp2_session_callbacks* cbs);
  void installUpstreamCallbacks(nghttp2_session_callbacks* cbs);
  // The two sessions of an interception, as h2_proxy.cc and fuzz/h2_streams_fuzz.cc both make
  // them (h2_callbacks.cc): with this object's callbacks, flow control by hand, no push, and
  // their SETTINGS and connection window queued. nghttp2's error, or 0.
  // The client's (server) session is held to the task's h2 limits (h2_limits.h).
  int newClientSession(nghttp2_session** out);
  int newUpstreamSession(nghttp2_session** out);
  // Client streams open here (begun and not closed).
  size_t openStreams() const { return streams_.size(); }
  // No stream is open.
  bool noStreams() const { return streams_.empty(); }
  // The upstream sent GOAWAY: its connection takes no new stream, now or from the pool.
  bool upstreamGoaway() const { return upGoaway_; }
  // Streams of the upstream connection opened here and not closed yet.
  int upstreamOpen() const { return upOpen_; }
  // Writes the audit line of every stream still open, with `why` as its error.
  void finishAll(std::string_view why);
  // The upstream connection ended: a stream not answered yet gets a 502, one whose response
  // had begun is reset (a cut response must not look whole).
  void failUpstreamStreams(const std::string& why);

  ClientConnection& c_;
  const policy::Target& target_;
  uint16_t port_;

 private:
  friend struct H2Callbacks;

  H2Stream* find(int32_t id);
  H2Stream* findUp(int32_t upId);
  void onRequestHead(H2Stream& s);
  void onRequestEnd(H2Stream& s);
  void releaseHold(H2Stream& s, bool complete);
  void submitUpstream(H2Stream& s);
  void sendContinue(H2Stream& s);  // a 100 to a client that asked for it, once
  void onResponseHead(H2Stream& s, bool endStream);
  void onUpstreamEnd(H2Stream& s);
  // Decodes and scrubs what the upstream sent into what the client gets, up to a bound.
  void produceDown(H2Stream& s);
  // Returns `n` received bytes' window to the upstream.
  void consumeUp(H2Stream& s, size_t n);
  // Answers the stream with sandgate's refusal (status, x-sandgate-reason, JSON body).
  void refuseStream(H2Stream& s, const Refusal& r);
  // Ends the stream towards the client with RST_STREAM (its response had begun).
  void resetStream(H2Stream& s, uint32_t code, std::string_view why);
  void cancelUpstream(H2Stream& s);
  void closeStream(int32_t id, uint32_t code);

  std::shared_ptr<RequestCredentials> creds_;  // made again when a reload changes the snapshot
  std::map<int32_t, std::unique_ptr<H2Stream>> streams_;  // by the client's stream id
  std::map<int32_t, int32_t> byUp_;                       // upstream stream id -> client's
  bool upGoaway_ = false;
  int upOpen_ = 0;
};

}  // namespace sandgate::proxy
