// The state of one HTTP/2 stream and nghttp2's callbacks into H2Streams, shared by
// h2_stream.cc (what a stream does) and h2_callbacks.cc (the frames that drive it). Internal to
// proxy/h2.
#pragma once

#include <nghttp2/nghttp2.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "broker/body_decoder.h"
#include "broker/scrubber.h"
#include "proxy/client/client_connection.h"
#include "proxy/exchange/budget_gate.h"
#include "proxy/exchange/request_credentials.h"
#include "proxy/h2/h2_request.h"
#include "proxy/h2/h2_stream.h"

namespace sandgate::proxy {

// A header field for nghttp2 (which copies it).
inline nghttp2_nv nv(const std::string& name, const std::string& value, uint8_t flags) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), flags};
}

inline std::vector<nghttp2_nv> nvs(const H2Fields& fields, uint8_t flags) {
  std::vector<nghttp2_nv> out;
  out.reserve(fields.size());
  for (const auto& [n, v] : fields) out.push_back(nv(n, v, n[0] == ':' ? 0 : flags));
  return out;
}

struct H2Stream {
  explicit H2Stream(int32_t i) : id(i) {}
  int32_t id;
  int32_t upId = 0;  // its stream on the upstream connection, while that is open
  RequestLog log;
  std::shared_ptr<RequestCredentials> creds;
  H2Fields fields;  // the request head as it arrives
  size_t headBytes = 0;
  bool headTooLarge = false;
  bool trailersSent = false;  // the client sent request trailers
  std::unique_ptr<H2Request> req;
  bool judged = false;   // the head arrived whole and was judged
  bool holding = false;  // the body is read for the form gate before anything goes upstream
  bool reqEnded = false;
  bool sentContinue = false;
  bool discard = false;  // refused: the body is dropped (its window returned at once)
  std::string upBody;    // client bytes not yet taken by the upstream (nor consumed)
  H2Fields resFields;    // the response head, then its trailers
  size_t resBytes = 0;
  bool haveTrailers = false;
  bool responded = false;  // a response (the upstream's or a refusal) went to the client
  bool upEnded = false;    // the upstream's response ended
  bool scrubDone = false;  // everything for the client is in downBody
  bool grpc = false;
  std::string rawDown;   // upstream body bytes not decoded and scrubbed yet (nor consumed)
  std::string downBody;  // scrubbed bytes for the client
  std::optional<broker::Scrubber> scrubber;
  std::unique_ptr<broker::BodyDecoder> decoder;
  // Last, so that it is destroyed first, while `log` (whose byte counts it settles) lives.
  std::unique_ptr<BudgetGate> budget;
};

// nghttp2's callbacks, into the H2Streams that user_data points at (h2_callbacks.cc).
struct H2Callbacks {
  static int beginHeaders(nghttp2_session*, const nghttp2_frame* f, void* p);
  static int clientHeader(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name,
                          size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* p);
  static int clientFrame(nghttp2_session*, const nghttp2_frame* f, void* p);
  static int clientData(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                        size_t len, void* p);
  static int clientClose(nghttp2_session*, int32_t id, uint32_t code, void* p);
  static ssize_t readDown(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length,
                          uint32_t* flags, nghttp2_data_source*, void* p);
  static int upHeader(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name, size_t namelen,
                      const uint8_t* value, size_t valuelen, uint8_t, void* p);
  static int upFrame(nghttp2_session*, const nghttp2_frame* f, void* p);
  static int upData(nghttp2_session*, uint8_t, int32_t upId, const uint8_t* data, size_t len,
                    void* p);
  static int upClose(nghttp2_session*, int32_t upId, uint32_t code, void* p);
  static ssize_t readUp(nghttp2_session*, int32_t upId, uint8_t* buf, size_t length,
                        uint32_t* flags, nghttp2_data_source*, void* p);
};

}  // namespace sandgate::proxy
