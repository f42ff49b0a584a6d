// BodyDecoder: undoes a response body's gzip or deflate coding (a content coding, or a transfer
// coding before chunked), streaming, so that the scrubber can read a body that an upstream
// compressed although identity was asked for.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace sandgate::broker {

class BodyDecoder {
 public:
  // Output per decode() call at most: a small compressed piece can expand a thousandfold, and
  // no body is ever held whole.
  static constexpr size_t kMaxOutput = 256 * 1024;

  // A decoder for one coding (gzip, x-gzip or deflate, any case, surrounding spaces ignored),
  // or null for anything else (none, identity, a list, br, zstd,
  // compress, an unknown token).
  static std::unique_ptr<BodyDecoder> forCoding(std::string_view coding);

  ~BodyDecoder();
  BodyDecoder(const BodyDecoder&) = delete;
  BodyDecoder& operator=(const BodyDecoder&) = delete;

  // Takes `in` after what is still pending, and appends to `out` what decodes from it, at most
  // kMaxOutput bytes (an `out` with that much room to spare never reallocates); what it could
  // not decode yet stays pending (call again with nothing new while pending()). False when the
  // input is not valid for the coding (error() says why): nothing more can be decoded then.
  bool decode(std::string_view in, std::string& out);
  // The last call stopped at kMaxOutput with more to decode from what it was given: call
  // again (with nothing new) before reading more input.
  bool pending() const { return more_; }
  // The whole encoded body has been read: is it complete (the compressed stream ended, and
  // nothing but gzip's optional further members followed)? An empty body is: servers label
  // empty bodies with their usual coding.
  bool complete() const;
  const std::string& error() const { return error_; }
  // The coding's registered name ("gzip", "deflate"), for logs.
  std::string_view name() const { return gzip_ ? "gzip" : "deflate"; }

 private:
  struct Stream;
  explicit BodyDecoder(bool gzip);
  bool start(int windowBits);

  bool gzip_;
  bool ended_ = false;
  bool more_ = false;
  bool received_ = false;  // any input at all
  std::unique_ptr<Stream> z_;
  std::string in_;  // taken, not decoded yet: compressed bytes, wiped as they are consumed
  std::string error_;
};

}  // namespace sandgate::broker
