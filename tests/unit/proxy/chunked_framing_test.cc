// The strict chunked framing check: what it accepts, what it refuses and why, and that the
// answer does not depend on how the bytes are split.
#include "proxy/client/chunked_framing.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "proxy/client/reasons.h"

namespace sandgate::proxy {
namespace {

using Status = ChunkedFraming::Status;

// Fed whole, then cut at every position into two pieces, then byte by byte: the same status
// and reason each way.
void expectEverySplit(std::string_view body, Status want, std::string_view reason = {}) {
  auto check = [&](ChunkedFraming& f, const std::string& how) {
    EXPECT_EQ(f.status(), want) << how << ": " << f.detail();
    if (want == Status::kError) {
      EXPECT_EQ(f.reason(), reason) << how;
    }
  };
  {
    ChunkedFraming f;
    f.feed(body);
    check(f, "whole");
  }
  for (size_t cut = 1; cut < body.size(); ++cut) {
    ChunkedFraming f;
    f.feed(body.substr(0, cut));
    f.feed(body.substr(cut));
    check(f, "cut at " + std::to_string(cut));
  }
  ChunkedFraming f;
  for (char c : body) f.feed(std::string_view(&c, 1));
  check(f, "byte by byte");
}

TEST(ChunkedFraming, AcceptsWhatRfc9112Allows) {
  expectEverySplit("0\r\n\r\n", Status::kDone);
  expectEverySplit("5\r\nhello\r\n0\r\n\r\n", Status::kDone);
  expectEverySplit("A\r\n0123456789\r\n0\r\n\r\n", Status::kDone);
  expectEverySplit("00005\r\nhello\r\n0\r\n\r\n", Status::kDone);  // leading zeros
  expectEverySplit("5;name\r\nhello\r\n0;last\r\n\r\n", Status::kDone);
  expectEverySplit("5 ; a = b ; c=\"q \\\" d\"\r\nhello\r\n0\r\n\r\n", Status::kDone);
  expectEverySplit("4\r\n\r\n\r\n\r\n0\r\n\r\n", Status::kDone);  // data that looks like CRLFs
  expectEverySplit("7fffffffffffffff\r\n", Status::kMore);        // the largest size
}

TEST(ChunkedFraming, BytesAfterTheEndAreNotJudged) {
  ChunkedFraming f;
  EXPECT_EQ(f.feed("0\r\n\r\nGET /next HTTP/1.1\r\n\r\n"), Status::kDone);
  EXPECT_EQ(f.feed("\x01 anything"), Status::kDone);
}

TEST(ChunkedFraming, RefusesMalformedSizes) {
  for (std::string_view body :
       {"0x5\r\nhello\r\n0\r\n\r\n", "+5\r\nhello\r\n0\r\n\r\n", "-5\r\nhello\r\n0\r\n\r\n",
        " 5\r\nhello\r\n0\r\n\r\n", "5_0\r\nhello\r\n0\r\n\r\n", "g\r\n", "\r\n",
        "8000000000000000\r\n", "10000000000000005\r\n"}) {
    SCOPED_TRACE(body);
    expectEverySplit(body, Status::kError, reason::kBadChunkedBody);
  }
}

TEST(ChunkedFraming, RefusesMalformedLinesAndData) {
  for (std::string_view body : {
           "5\nhello\r\n0\r\n\r\n",             // bare LF ending the line
           "5\rhello\r\n0\r\n\r\n",             // CR without LF
           "3\r\nhello\r\n0\r\n\r\n",           // a chunk longer than its size
           "5\r\nhello\n0\r\n\r\n",             // data ended by a bare LF
           "5;a\nb\r\nhello\r\n0\r\n\r\n",      // bare LF in an extension
           "5;a=\x01\r\nhello\r\n0\r\n\r\n",    // a control character
           "5;a=\"open\r\nhello\r\n0\r\n\r\n",  // an unterminated quoted string
           "5;=v\r\nhello\r\n0\r\n\r\n",        // an extension without a name
           "5;a=\r\nhello\r\n0\r\n\r\n",        // `=` without a value
           "5;a=b c\r\nhello\r\n0\r\n\r\n",     // two values
           "5 x\r\nhello\r\n0\r\n\r\n",         // junk after the size
           "0\r\n\r\r",                         // the final CRLF broken
       }) {
    SCOPED_TRACE(body);
    expectEverySplit(body, Status::kError, reason::kBadChunkedBody);
  }
  std::string nul("5;a\0b\r\nhello\r\n0\r\n\r\n", 19);
  expectEverySplit(nul, Status::kError, reason::kBadChunkedBody);
}

TEST(ChunkedFraming, RefusesTrailers) {
  expectEverySplit("5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n", Status::kError,
                   reason::kRequestTrailers);
}

TEST(ChunkedFraming, BoundsAChunkLine) {
  std::string line = "5;" + std::string(ChunkedFraming::kMaxChunkLine, 'e');
  ChunkedFraming f;
  EXPECT_EQ(f.feed(line), Status::kError);
  EXPECT_EQ(f.reason(), reason::kBadChunkedBody);
  // The data of a chunk is not a line: a large chunk passes.
  ChunkedFraming big;
  EXPECT_EQ(big.feed("10000\r\n"), Status::kMore);
  EXPECT_EQ(big.feed(std::string(0x10000, 'x')), Status::kMore);
  EXPECT_EQ(big.feed("\r\n0\r\n\r\n"), Status::kDone);
}

}  // namespace
}  // namespace sandgate::proxy
