// Fuzzes the streaming gzip/deflate body decoder (broker/body_decoder.h) that undoes a
// response's coding before the scrubber reads it.
//
// Properties, beyond not crashing:
//  - No call gives more than kMaxOutput bytes (a small piece can expand a thousandfold).
//  - Split invariance: the same bytes, however the upstream's reads cut them, decode to the
//    same output, the same verdict and the same completeness.
//  - Round trip (first byte odd; even: the rest is a body as an upstream sent it): a body compressed here (gzip, possibly several members;
//    zlib-wrapped or bare deflate) decodes to exactly that body and is complete.
#include <fuzzer/FuzzedDataProvider.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "broker/body_decoder.h"
#include "fuzz/check.h"

namespace {

using sandgate::broker::BodyDecoder;

struct Decoded {
  bool ok = true;
  bool complete = false;
  std::string out;
};

// Feeds `in` in pieces of the given sizes (cycling; the whole at once when `pieces` is empty).
Decoded decode(bool gzip, std::string_view in, const std::vector<size_t>& pieces) {
  auto d = BodyDecoder::forCoding(gzip ? "gzip" : "deflate");
  SANDGATE_FUZZ_CHECK(d != nullptr, "gzip and deflate have decoders");
  Decoded r;
  size_t k = 0;
  for (size_t at = 0; at < in.size() || at == 0;) {
    const size_t n = pieces.empty() ? in.size() : std::min(in.size() - at, pieces[k++ % pieces.size()]);
    const size_t before = r.out.size();
    r.ok = d->decode(in.substr(at, n), r.out);
    SANDGATE_FUZZ_CHECK(r.out.size() - before <= BodyDecoder::kMaxOutput, "kMaxOutput per call");
    // Drain what the decoder still holds before the next piece, as relayMessage does.
    for (int i = 0; r.ok && d->pending(); ++i) {
      SANDGATE_FUZZ_CHECK(i < 10000, "pending() ends");
      const size_t mark = r.out.size();
      r.ok = d->decode({}, r.out);
      SANDGATE_FUZZ_CHECK(r.out.size() - mark <= BodyDecoder::kMaxOutput, "kMaxOutput per call");
    }
    if (!r.ok) return r;
    at += n;
    if (in.empty()) break;
  }
  r.complete = d->complete();
  return r;
}

std::vector<size_t> consumePieces(FuzzedDataProvider& in) {
  std::vector<size_t> pieces;
  const size_t count = in.ConsumeIntegralInRange<size_t>(1, 6);
  for (size_t i = 0; i < count; ++i) pieces.push_back(in.ConsumeIntegralInRange<size_t>(1, 2000));
  return pieces;
}

// zlib's own encoder: windowBits 15+16 gzip, 15 zlib, -15 bare deflate.
std::string compress(std::string_view plain, int windowBits, int level) {
  z_stream z{};
  SANDGATE_FUZZ_CHECK(deflateInit2(&z, level, Z_DEFLATED, windowBits, 8, Z_DEFAULT_STRATEGY) == Z_OK,
                      "deflateInit2");
  std::string out(deflateBound(&z, plain.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  SANDGATE_FUZZ_CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END, "deflate");
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

void roundTrip(FuzzedDataProvider& in) {
  const auto pieces = consumePieces(in);
  const int kind = in.ConsumeIntegralInRange(0, 2);  // gzip, zlib, bare deflate
  const int level = in.ConsumeIntegralInRange(0, 9);
  const int members = kind == 0 ? in.ConsumeIntegralInRange(1, 3) : 1;
  std::string plain, encoded;
  for (int m = 0; m < members; ++m) {
    // A long run now and then, so that output reaches kMaxOutput and pending() is exercised.
    std::string part = in.ConsumeRandomLengthString(8192);
    if (in.ConsumeBool()) part += std::string(in.ConsumeIntegralInRange<size_t>(0, 600000), 'a');
    plain += part;
    encoded += compress(part, kind == 0 ? 15 + 16 : kind == 1 ? 15 : -15, level);
  }
  const Decoded d = decode(kind == 0, encoded, pieces);
  SANDGATE_FUZZ_CHECK(d.ok, "what zlib encoded decodes");
  SANDGATE_FUZZ_CHECK(d.complete, "and is complete");
  SANDGATE_FUZZ_CHECK(d.out == plain, "to the body that was encoded");
}

void raw(FuzzedDataProvider& in) {
  const bool gzip = in.ConsumeBool();
  const auto pieces = consumePieces(in);
  const std::string body = in.ConsumeRemainingBytesAsString();
  const Decoded whole = decode(gzip, body, {});
  const Decoded split = decode(gzip, body, pieces);
  SANDGATE_FUZZ_CHECK(whole.ok == split.ok, "the verdict does not depend on the split");
  if (whole.ok) {
    SANDGATE_FUZZ_CHECK(whole.out == split.out, "nor the output");
    SANDGATE_FUZZ_CHECK(whole.complete == split.complete, "nor completeness");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  FuzzedDataProvider in(data + 1, size - 1);
  if (data[0] & 1) {
    roundTrip(in);
  } else {
    raw(in);
  }
  return 0;
}
