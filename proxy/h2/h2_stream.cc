// The streams of one HTTP/2 interception (see h2_stream.h).
#include "proxy/h2/h2_stream.h"

#include <fmt/format.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "broker/body_decoder.h"
#include "broker/scrubber.h"
#include "proxy/client/client_connection.h"
#include "proxy/exchange/request_credentials.h"
#include "proxy/h2/h2_limits.h"
#include "proxy/h2/h2_request.h"
#include "proxy/h2/h2_stream_state.h"

namespace sandgate::proxy {

namespace {

constexpr size_t kDownHigh = 64 * 1024;  // bytes held for the client before decoding more
constexpr size_t kDecodeStep = 16 * 1024;

}  // namespace

H2Streams::H2Streams(ClientConnection& c, const policy::Target& target, uint16_t port)
    : c_(c), target_(target), port_(port), creds_(std::make_shared<RequestCredentials>(c)) {}

H2Streams::~H2Streams() = default;

H2Stream* H2Streams::find(int32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

H2Stream* H2Streams::findUp(int32_t upId) {
  auto it = byUp_.find(upId);
  return it == byUp_.end() ? nullptr : find(it->second);
}

void H2Streams::onRequestHead(H2Stream& s) {
  // Decided against the configuration current now, and the task token checked again, as
  // each HTTP/1.1 request in a tunnel is (intercept_session.cc).
  bool reloaded = false;
  auto revoked = refreshSnapshot(c_, &reloaded);
  if (reloaded) creds_ = std::make_shared<RequestCredentials>(c_);
  if (!revoked) revoked = recheckToken(c_);
  s.creds = creds_;
  s.judged = true;
  if (s.headTooLarge) {
    Refusal r{.status = 431,
              .reason = reason::kHeaderTooLarge,
              .detail = "request head over limits.max_header_bytes"};
    refuseStream(s, r);
    return;
  }
  if (revoked) {
    refuseStream(s, *revoked);
    return;
  }
  if (upstreamGone()) {
    UpstreamResponseFailure failure{.closed = true, .error = "the connection has ended"};
    Refusal r = upstreamResponseRefusal(failure, s.log.record.task, s.log.record.host, "",
                                        upstreamAddress());
    refuseStream(s, r);
    return;
  }
  s.req = std::make_unique<H2Request>(c_, *s.creds, target_, port_);
  if (auto r = s.req->judge(s.fields, s.log)) {
    refuseStream(s, *r);
    return;
  }
  s.fields.clear();
  if (s.req->needsFormBody() && !s.reqEnded) {
    s.holding = true;
    // The body to be judged comes only after the 100 its client waits for (as on HTTP/1.1,
    // form_gate.h).
    if (s.req->asksContinue()) sendContinue(s);
    return;
  }
  submitUpstream(s);
}

void H2Streams::onRequestEnd(H2Stream& s) {
  s.reqEnded = true;
  if (s.holding) {
    releaseHold(s, true);
  } else if (s.upId) {
    nghttp2_session_resume_data(upstreamSession(), s.upId);
  }
}

void H2Streams::releaseHold(H2Stream& s, bool complete) {
  s.holding = false;
  if (auto r = s.req->judgeFormBody(s.upBody, complete, s.log)) {
    refuseStream(s, *r);
    return;
  }
  submitUpstream(s);
}

void H2Streams::submitUpstream(H2Stream& s) {
  // The task's budgets, as for an HTTP/1.1 request (exchange.h): after the policy and the form
  // gate, before the credential and the upstream; what the stream moved is settled when it
  // ends (the gate's destructor, with the stream).
  s.budget = std::make_unique<BudgetGate>(c_, s.log);
  const std::optional<uint64_t> announced =
      s.reqEnded ? std::optional<uint64_t>(s.upBody.size()) : std::nullopt;
  if (auto r = s.budget->admit(announced)) {
    refuseStream(s, *r);
    return;
  }
  H2Fields out;
  bool expectContinue = false;
  if (auto r = s.req->forUpstream(s.log, out, expectContinue)) {
    refuseStream(s, *r);
    return;
  }
  // Never indexed: no credential enters either HPACK table, where a later header's
  // compression could reveal it.
  auto v = nvs(out, NGHTTP2_NV_FLAG_NO_INDEX);
  nghttp2_data_provider body{};
  body.read_callback = &H2Callbacks::readUp;
  const bool hasBody = !s.reqEnded || !s.upBody.empty();
  const int32_t upId = nghttp2_submit_request(upstreamSession(), nullptr, v.data(), v.size(),
                                              hasBody ? &body : nullptr, nullptr);
  for (auto& [n, value] : out) OPENSSL_cleanse(value.data(), value.size());
  auto& rec = s.log.record;
  rec.upstream = upstreamAddress();
  if (upId < 0) {
    UpstreamResponseFailure failure{.closed = true, .error = nghttp2_strerror(upId)};
    Refusal r = upstreamResponseRefusal(failure, rec.task, rec.host, rec.rule, rec.upstream);
    refuseStream(s, r);
    return;
  }
  s.upId = upId;
  byUp_[upId] = s.id;
  ++upOpen_;
  // sandgate answers 100-continue itself, as on HTTP/1.1 (the upstream never sees Expect).
  if (expectContinue && !s.reqEnded) sendContinue(s);
}

void H2Streams::sendContinue(H2Stream& s) {
  if (s.sentContinue) return;
  s.sentContinue = true;
  static const std::string kStatus = ":status", k100 = "100";
  nghttp2_nv cont = nv(kStatus, k100, NGHTTP2_NV_FLAG_NONE);
  nghttp2_submit_headers(clientSession(), NGHTTP2_FLAG_NONE, s.id, nullptr, &cont, 1, nullptr);
}

void H2Streams::onResponseHead(H2Stream& s, bool endStream) {
  int status = 0;
  for (const auto& [n, v] : s.resFields) {
    if (n == ":status") status = std::atoi(v.c_str());
    if (n == "content-type") s.grpc = v.starts_with("application/grpc");
  }
  if (status >= 100 && status < 200) {  // informational: the final head follows
    s.resFields.clear();
    s.resBytes = 0;
    return;
  }
  H2Fields out;
  auto refusal = h2ResponseHead(*s.creds, status, s.resFields, !endStream, s.grpc, s.log,
                                s.scrubber, s.decoder, out);
  s.resFields.clear();
  s.resBytes = 0;
  if (refusal) {
    cancelUpstream(s);
    refuseStream(s, *refusal);
    return;
  }
  s.log.record.status = status;
  auto v = nvs(out, NGHTTP2_NV_FLAG_NONE);
  nghttp2_data_provider body{};
  body.read_callback = &H2Callbacks::readDown;
  s.responded = true;
  if (endStream) {
    s.upEnded = s.scrubDone = true;
    nghttp2_submit_response(clientSession(), s.id, v.data(), v.size(), nullptr);
  } else {
    nghttp2_submit_response(clientSession(), s.id, v.data(), v.size(), &body);
  }
}

void H2Streams::onUpstreamEnd(H2Stream& s) {
  s.upEnded = true;
  produceDown(s);
  nghttp2_session_resume_data(clientSession(), s.id);
}

void H2Streams::consumeUp(H2Stream& s, size_t n) {
  if (s.upId) {
    nghttp2_session_consume(upstreamSession(), s.upId, n);
  } else {
    nghttp2_session_consume_connection(upstreamSession(), n);
  }
}

void H2Streams::produceDown(H2Stream& s) {
  std::string plain;
  while (!s.scrubDone && s.downBody.size() < kDownHigh) {
    plain.clear();
    if (s.decoder && s.decoder->pending()) {
      if (!s.decoder->decode({}, plain)) break;
    } else if (!s.rawDown.empty()) {
      const size_t n = std::min(s.rawDown.size(), kDecodeStep);
      const std::string_view piece(s.rawDown.data(), n);
      if (s.decoder) {
        if (!s.decoder->decode(piece, plain)) {
          resetStream(s, NGHTTP2_INTERNAL_ERROR,
                      fmt::format("the response body does not decode: {}", s.decoder->error()));
          return;
        }
      } else {
        plain.assign(piece);
      }
      s.rawDown.erase(0, n);
      consumeUp(s, n);
    } else {
      if (s.upEnded) {
        // The whole body has been read: what the scrubber held back for a secret that might
        // continue in the next DATA frame is released (scrubbed).
        if (s.decoder && !s.decoder->complete()) {
          resetStream(s, NGHTTP2_INTERNAL_ERROR, "the response body ends inside its coding");
          return;
        }
        if (s.scrubber) {
          const uint64_t before = s.scrubber->count();
          const size_t kept = s.downBody.size();
          s.scrubber->finish(s.downBody);
          if (s.grpc && s.scrubber->count() != before && !s.scrubber->preservesLength()) {
            s.downBody.resize(kept);
            s.log.record.verdict = Outcome::kError;
            s.log.record.reason = reason::kGrpcNotScrubbable;
            resetStream(s, NGHTTP2_INTERNAL_ERROR,
                        "a secret in a gRPC message could not be replaced by one of its length");
            return;
          }
        }
        s.scrubDone = true;
      }
      break;
    }
    if (s.scrubber) {
      const uint64_t before = s.scrubber->count();
      s.scrubber->feed(plain, s.downBody);
      // gRPC frames each message with its length (and protobuf each field): a replacement of
      // another length would corrupt the stream silently. The stream is reset instead, before
      // the bytes with the replacement go out; what went before carried no secret.
      if (s.grpc && s.scrubber->count() != before && !s.scrubber->preservesLength()) {
        s.downBody.clear();
        s.log.record.verdict = Outcome::kError;
        s.log.record.reason = reason::kGrpcNotScrubbable;
        resetStream(s, NGHTTP2_INTERNAL_ERROR,
                    "a secret in a gRPC message could not be replaced by one of its length");
        return;
      }
    } else {
      s.downBody += plain;
    }
  }
}

void H2Streams::refuseStream(H2Stream& s, const Refusal& refusal) {
  if (s.responded) {
    resetStream(s, NGHTTP2_REFUSED_STREAM, refusal.detail);
    return;
  }
  Refusal r = recordRefusal(c_, s.log, refusal);
  cancelUpstream(s);
  s.discard = true;
  nghttp2_session_consume(clientSession(), s.id, s.upBody.size());
  s.upBody.clear();
  s.holding = false;
  s.downBody = refusalJson(r);
  s.scrubDone = s.upEnded = s.responded = true;
  H2Fields head = {{":status", std::to_string(r.status)},
                   {"content-type", "application/json"},
                   {"x-sandgate-reason", std::string(r.reason)},
                   {"x-request-id", r.requestId},
                   {"content-length", std::to_string(s.downBody.size())}};
  if (r.retryAfter > 0) head.emplace_back("retry-after", std::to_string(r.retryAfter));
  auto v = nvs(head, NGHTTP2_NV_FLAG_NONE);
  nghttp2_data_provider body{};
  body.read_callback = &H2Callbacks::readDown;
  nghttp2_submit_response(clientSession(), s.id, v.data(), v.size(), &body);
}

void H2Streams::resetStream(H2Stream& s, uint32_t code, std::string_view why) {
  auto& rec = s.log.record;
  if (rec.error.empty()) rec.error = std::string(why);
  cancelUpstream(s);
  s.discard = true;
  nghttp2_submit_rst_stream(clientSession(), NGHTTP2_FLAG_NONE, s.id, code);
}

void H2Streams::cancelUpstream(H2Stream& s) {
  if (!s.upId) return;
  nghttp2_submit_rst_stream(upstreamSession(), NGHTTP2_FLAG_NONE, s.upId, NGHTTP2_CANCEL);
  byUp_.erase(s.upId);
  s.upId = 0;
  nghttp2_session_consume_connection(upstreamSession(), s.rawDown.size());
  s.rawDown.clear();
}

void H2Streams::closeStream(int32_t id, uint32_t code) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  H2Stream& s = *it->second;
  cancelUpstream(s);
  auto& rec = s.log.record;
  if (!s.judged) {
    // nghttp2 refused the stream before its head was whole: a malformed request (RFC 9113
    // §8.1.1), reset with PROTOCOL_ERROR; nothing of it went upstream.
    rec.verdict = Outcome::kDeny;
    rec.reason = reason::kH2ProtocolError;
  }
  if (code != NGHTTP2_NO_ERROR && rec.error.empty()) {
    rec.error = fmt::format("stream reset: {}", nghttp2_http2_strerror(code));
  }
  if (s.creds) s.creds->countScrubs(s.scrubber);
  if (s.budget) s.budget->settle();
  finishRequest(c_, s.log);
  streams_.erase(it);
}

void H2Streams::finishAll(std::string_view why) {
  for (auto& [id, s] : streams_) {
    auto& rec = s->log.record;
    if (rec.error.empty()) rec.error = std::string(why);
    if (!s->judged) {
      rec.verdict = Outcome::kDeny;
      rec.reason = reason::kH2ProtocolError;
    }
    if (s->creds) s->creds->countScrubs(s->scrubber);
    if (s->budget) s->budget->settle();
    finishRequest(c_, s->log);
  }
  streams_.clear();
  byUp_.clear();
}

void H2Streams::failUpstreamStreams(const std::string& why) {
  std::vector<int32_t> ids;
  for (auto& [id, s] : streams_) {
    if (s->upId || (s->judged && !s->responded && !s->discard)) ids.push_back(id);
  }
  for (int32_t id : ids) {
    H2Stream& s = *streams_[id];
    byUp_.erase(s.upId);
    s.upId = 0;
    if (s.upEnded && s.responded) continue;  // its whole response is here
    if (!s.responded) {
      UpstreamResponseFailure failure{.closed = true, .error = why};
      Refusal r = upstreamResponseRefusal(failure, s.log.record.task, s.log.record.host,
                                          s.log.record.rule, upstreamAddress());
      refuseStream(s, r);
    } else {
      resetStream(s, NGHTTP2_INTERNAL_ERROR, why);
    }
  }
}

}  // namespace sandgate::proxy
