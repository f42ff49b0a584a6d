// Streaming gzip/deflate decoding for response scrubbing (see body_decoder.h).
#include "broker/body_decoder.h"

#include <openssl/crypto.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "broker/headers.h"
#include "broker/secret.h"

namespace sandgate::broker {

namespace {

// zlib's window holds the decoded bytes, which may be a secret the scrubber is about to
// replace: its memory is wiped before it is freed. Each block starts with its size.
constexpr size_t kPrefix = alignof(std::max_align_t);

voidpf wipingAlloc(voidpf, uInt items, uInt size) {
  const size_t n = static_cast<size_t>(items) * size;
  auto* p = static_cast<unsigned char*>(std::malloc(n + kPrefix));
  if (!p) return Z_NULL;
  std::memcpy(p, &n, sizeof n);
  return p + kPrefix;
}

void wipingFree(voidpf, voidpf address) {
  if (!address) return;
  auto* p = static_cast<unsigned char*>(address) - kPrefix;
  size_t n = 0;
  std::memcpy(&n, p, sizeof n);
  OPENSSL_cleanse(p, n + kPrefix);
  std::free(p);
}

}  // namespace

struct BodyDecoder::Stream {
  z_stream z{};
  bool open = false;
  bool outputFull = false;  // the last inflate() filled its output: more may be held inside
  ~Stream() {
    if (open) inflateEnd(&z);
  }
};

std::unique_ptr<BodyDecoder> BodyDecoder::forCoding(std::string_view coding) {
  const std::string_view c = trimOws(coding);
  if (iequals(c, "gzip") || iequals(c, "x-gzip"))
    return std::unique_ptr<BodyDecoder>(new BodyDecoder(true));
  if (iequals(c, "deflate")) return std::unique_ptr<BodyDecoder>(new BodyDecoder(false));
  return nullptr;
}

BodyDecoder::BodyDecoder(bool gzip) : gzip_(gzip), z_(std::make_unique<Stream>()) {}

BodyDecoder::~BodyDecoder() { wipe(in_); }

bool BodyDecoder::complete() const {
  return !received_ || (ended_ && in_.empty() && !z_->outputFull);
}

bool BodyDecoder::start(int windowBits) {
  z_->z.zalloc = wipingAlloc;
  z_->z.zfree = wipingFree;
  z_->z.opaque = Z_NULL;
  if (inflateInit2(&z_->z, windowBits) != Z_OK) {
    error_ = "the decoder could not be set up";
    return false;
  }
  z_->open = true;
  return true;
}

bool BodyDecoder::decode(std::string_view in, std::string& out) {
  more_ = false;
  if (!error_.empty()) return false;
  in_.append(in);
  received_ = received_ || !in.empty();
  size_t produced = 0;
  while ((!in_.empty() || z_->outputFull) && produced < kMaxOutput) {
    if (!z_->open) {
      int windowBits = 15 + 16;  // gzip's wrapper
      if (!gzip_) {
        // "deflate" is the zlib format (RFC 9110, 8.4.1.2), but some servers send a bare
        // deflate stream: a valid zlib header (compression method 8, check bits) decides.
        if (in_.size() < 2) break;
        const auto cmf = static_cast<unsigned char>(in_[0]);
        const auto flg = static_cast<unsigned char>(in_[1]);
        const bool zlibWrapped =
            (cmf & 0x0f) == 8 && (cmf >> 4) <= 7 && (cmf * 256 + flg) % 31 == 0;
        windowBits = zlibWrapped ? 15 : -15;
      }
      if (!start(windowBits)) return false;
    } else if (ended_) {
      if (!gzip_) {
        error_ = "data after the end of the deflate stream";
        return false;
      }
      // Another gzip member (RFC 1952 allows several, one after the other).
      if (inflateReset(&z_->z) != Z_OK) {
        error_ = "the decoder could not be reset";
        return false;
      }
      ended_ = false;
    }
    const size_t room = std::min<size_t>(kMaxOutput - produced, 64 * 1024);
    const size_t before = out.size();
    out.resize(before + room);
    z_->z.next_in = reinterpret_cast<Bytef*>(in_.data());
    z_->z.avail_in = static_cast<uInt>(in_.size());
    z_->z.next_out = reinterpret_cast<Bytef*>(out.data() + before);
    z_->z.avail_out = static_cast<uInt>(room);
    const int r = inflate(&z_->z, Z_NO_FLUSH);
    const size_t got = room - z_->z.avail_out;
    const size_t used = in_.size() - z_->z.avail_in;
    out.resize(before + got);
    produced += got;
    z_->outputFull = r == Z_OK && z_->z.avail_out == 0;
    if (used > 0) {
      OPENSSL_cleanse(in_.data(), used);
      in_.erase(0, used);
    }
    if (r == Z_STREAM_END) {
      ended_ = true;
      z_->outputFull = false;
      continue;
    }
    if (r == Z_BUF_ERROR || (r == Z_OK && got == 0 && used == 0)) break;  // needs more input
    if (r != Z_OK) {
      error_ = z_->z.msg ? z_->z.msg : "invalid compressed data";
      return false;
    }
  }
  more_ = produced >= kMaxOutput && (!in_.empty() || z_->outputFull);
  return true;
}

}  // namespace sandgate::broker
