// BodyDecoder: gzip and deflate (zlib-wrapped and bare) decoded in pieces of any size, with a
// bounded output per call, and refused when corrupt or cut short.
#include "broker/body_decoder.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

namespace sandgate::broker {
namespace {

// `plain` compressed by zlib: windowBits 15+16 gzip, 15 zlib, -15 bare deflate.
std::string compress(const std::string& plain, int windowBits) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, windowBits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, plain.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

// Feeds `encoded` in pieces of `step` bytes, draining while pending(); the decoded body, or
// "<error: …>".
std::string decodeAll(BodyDecoder& d, const std::string& encoded, size_t step) {
  std::string out;
  for (size_t at = 0; at < encoded.size(); at += step) {
    if (!d.decode(std::string_view(encoded).substr(at, step), out))
      return "<error: " + d.error() + ">";
    while (d.pending()) {
      if (!d.decode({}, out)) return "<error: " + d.error() + ">";
    }
  }
  return out;
}

const std::string kBody =
    R"({"headers": [["Authorization", "Bearer sk-real-secret-value-0123456789"]], "n": 1})";

TEST(BodyDecoder, KnowsOnlyGzipAndDeflate) {
  for (auto c : {"gzip", "x-gzip", "GZIP", " gzip ", "deflate", "Deflate"}) {
    EXPECT_NE(BodyDecoder::forCoding(c), nullptr) << c;
  }
  for (auto c : {"", "identity", "br", "zstd", "compress", "gzip, gzip", "gzip;q=1", "sk-x"}) {
    EXPECT_EQ(BodyDecoder::forCoding(c), nullptr) << c;
  }
  EXPECT_EQ(BodyDecoder::forCoding("x-gzip")->name(), "gzip");
  EXPECT_EQ(BodyDecoder::forCoding("deflate")->name(), "deflate");
}

TEST(BodyDecoder, DecodesInPiecesOfAnySize) {
  struct Case {
    const char* coding;
    int windowBits;
  };
  for (auto [coding, bits] : {Case{"gzip", 15 + 16}, Case{"deflate", 15}, Case{"deflate", -15}}) {
    const std::string encoded = compress(kBody, bits);
    for (size_t step : {size_t{1}, size_t{2}, size_t{7}, encoded.size()}) {
      auto d = BodyDecoder::forCoding(coding);
      EXPECT_EQ(decodeAll(*d, encoded, step), kBody) << coding << " " << bits << " " << step;
      EXPECT_TRUE(d->complete()) << coding << " " << bits << " " << step;
    }
  }
}

TEST(BodyDecoder, ReadsGzipMembersOneAfterAnother) {
  const std::string encoded = compress("first,", 15 + 16) + compress("second", 15 + 16);
  auto d = BodyDecoder::forCoding("gzip");
  EXPECT_EQ(decodeAll(*d, encoded, 5), "first,second");
  EXPECT_TRUE(d->complete());
}

TEST(BodyDecoder, BoundsWhatOneCallProduces) {
  // 4 MiB of zeros compress to a few KiB: handed over at once, they come out in slices.
  const std::string plain(4 * 1024 * 1024, '\0');
  const std::string encoded = compress(plain, 15 + 16);
  ASSERT_LT(encoded.size(), 16u * 1024);
  auto d = BodyDecoder::forCoding("gzip");
  std::string out;
  ASSERT_TRUE(d->decode(encoded, out));
  EXPECT_EQ(out.size(), BodyDecoder::kMaxOutput);
  EXPECT_TRUE(d->pending());
  EXPECT_FALSE(d->complete());
  size_t calls = 1;
  while (d->pending()) {
    const size_t before = out.size();
    ASSERT_TRUE(d->decode({}, out));
    EXPECT_LE(out.size() - before, BodyDecoder::kMaxOutput);
    ++calls;
  }
  EXPECT_EQ(out, plain);
  EXPECT_TRUE(d->complete());
  EXPECT_GE(calls, plain.size() / BodyDecoder::kMaxOutput);
}

TEST(BodyDecoder, RefusesCorruptInput) {
  std::string encoded = compress(kBody, 15 + 16);
  encoded[encoded.size() / 2] ^= 0x55;
  encoded[encoded.size() / 2 + 1] ^= 0x55;
  auto d = BodyDecoder::forCoding("gzip");
  std::string out;
  const bool ok = d->decode(encoded, out);
  // A flipped byte is found by the data itself or by the CRC at the end.
  EXPECT_FALSE(ok && d->complete());
  if (!ok) {
    EXPECT_FALSE(d->error().empty());
  }

  auto notGzip = BodyDecoder::forCoding("gzip");
  EXPECT_FALSE(notGzip->decode(kBody, out));
  EXPECT_FALSE(notGzip->error().empty());
  // Once refused, it stays refused.
  EXPECT_FALSE(notGzip->decode(compress(kBody, 15 + 16), out));
}

TEST(BodyDecoder, ACutStreamIsNotComplete) {
  const std::string encoded = compress(kBody, 15 + 16);
  auto d = BodyDecoder::forCoding("gzip");
  std::string out;
  ASSERT_TRUE(d->decode(std::string_view(encoded).substr(0, encoded.size() - 4), out));
  EXPECT_FALSE(d->complete());
}

TEST(BodyDecoder, AnEmptyBodyIsComplete) {
  for (auto c : {"gzip", "deflate"}) {
    auto d = BodyDecoder::forCoding(c);
    std::string out;
    EXPECT_TRUE(d->decode({}, out));
    EXPECT_TRUE(out.empty());
    EXPECT_TRUE(d->complete()) << c;
  }
  // One byte of a stream is not an empty body.
  auto d = BodyDecoder::forCoding("deflate");
  std::string out;
  EXPECT_TRUE(d->decode("x", out));
  EXPECT_FALSE(d->complete());
}

TEST(BodyDecoder, RefusesBytesAfterTheDeflateStream) {
  auto d = BodyDecoder::forCoding("deflate");
  std::string out;
  EXPECT_FALSE(d->decode(compress(kBody, 15) + "trailing", out));
  EXPECT_EQ(d->error(), "data after the end of the deflate stream");
}

}  // namespace
}  // namespace sandgate::broker
