// The codings of a response body as scrubbing sees them (proxy/exchange/request_credentials.h):
// every field line of Content-Encoding and Transfer-Encoding counts, not only the first of each
// name.
#include "proxy/exchange/request_credentials.h"

#include <gtest/gtest.h>

#include <boost/beast/http/fields.hpp>
#include <string>
#include <utility>
#include <vector>

namespace sandgate::proxy {
namespace {

namespace http = boost::beast::http;

struct Case {
  const char* name;
  std::vector<std::pair<const char*, const char*>> fields;  // in the order sent
  std::vector<std::string> codings;                         // "field:name"
};

class ResponseCodingsTest : public ::testing::TestWithParam<Case> {};

TEST_P(ResponseCodingsTest, ListsEveryLayer) {
  http::fields f;
  for (const auto& [name, value] : GetParam().fields) f.insert(name, value);
  std::vector<std::string> got;
  for (const auto& c : responseCodings(f)) {
    got.push_back(std::string(c.field) + ":" + std::string(c.name));
  }
  EXPECT_EQ(got, GetParam().codings);
}

INSTANTIATE_TEST_SUITE_P(
    , ResponseCodingsTest,
    ::testing::Values(
        Case{"None", {{"Content-Type", "text/plain"}}, {}},
        Case{"IdentityOnly", {{"Content-Encoding", "identity"}}, {}},
        Case{"OneGzip", {{"Content-Encoding", "gzip"}}, {"Content-Encoding:gzip"}},
        Case{"IdentityThenGzipOnTwoLines",
             {{"Content-Encoding", "identity"}, {"Content-Encoding", "gzip"}},
             {"Content-Encoding:gzip"}},
        Case{"GzipOnTwoLines",
             {{"Content-Encoding", "gzip"}, {"Content-Encoding", "GZIP"}},
             {"Content-Encoding:gzip", "Content-Encoding:GZIP"}},
        Case{"IdentityThenBrWithAFieldBetween",
             {{"Content-Encoding", "identity"}, {"X-Other", "1"}, {"content-encoding", "br"}},
             {"Content-Encoding:br"}},
        Case{"ListAndLine",
             {{"Content-Encoding", "identity, deflate"}, {"Content-Encoding", " gzip "}},
             {"Content-Encoding:deflate", "Content-Encoding:gzip"}},
        Case{"FinalChunkedIsFraming", {{"Transfer-Encoding", "chunked"}}, {}},
        Case{"TransferGzipThenChunkedOnTwoLines",
             {{"Transfer-Encoding", "gzip"}, {"Transfer-Encoding", "chunked"}},
             {"Transfer-Encoding:gzip"}},
        Case{"TransferGzipTwiceOnTwoLines",
             {{"Transfer-Encoding", "gzip"}, {"Transfer-Encoding", "gzip, chunked"}},
             {"Transfer-Encoding:gzip", "Transfer-Encoding:gzip"}},
        Case{"ChunkedNotLastIsALayer",
             {{"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "gzip"}},
             {"Transfer-Encoding:chunked", "Transfer-Encoding:gzip"}},
        Case{"TransferIdentityIsNotIgnored",
             {{"Transfer-Encoding", "identity"}, {"Transfer-Encoding", "chunked"}},
             {"Transfer-Encoding:identity"}},
        Case{"ContentCodingsComeFirstWhateverTheOrderSent",
             {{"Transfer-Encoding", "gzip, chunked"}, {"Content-Encoding", "deflate"}},
             {"Content-Encoding:deflate", "Transfer-Encoding:gzip"}}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace sandgate::proxy
