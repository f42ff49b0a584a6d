// The non-template helpers of the message relay (proxy/relay.h): a request head that carried an
// injected credential is overwritten in place before its memory goes back to the allocator.
#include "proxy/relay.h"

#include <gtest/gtest.h>

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <string_view>

namespace sandgate::proxy {
namespace {

namespace http = boost::beast::http;

bool allZero(std::string_view v) { return v.find_first_not_of('\0') == std::string_view::npos; }

TEST(CleanseRequestHead, OverwritesTheTargetAndEveryFieldValue) {
  http::request<http::empty_body> req{http::verb::get, "/v1/models?key=sk-live-0123456789", 11};
  req.set(http::field::host, "api.test");
  req.set(http::field::authorization, "Bearer sk-live-0123456789");
  req.insert("X-Trace", "plain");
  const size_t targetSize = req.target().size();

  cleanseRequestHead(req);

  EXPECT_EQ(req.target().size(), targetSize);
  EXPECT_TRUE(allZero(req.target()));
  size_t fields = 0;
  for (const auto& f : req) {
    ++fields;
    EXPECT_FALSE(f.value().empty()) << f.name_string();
    EXPECT_TRUE(allZero(f.value())) << f.name_string();
  }
  EXPECT_EQ(fields, 3u);
}

TEST(CleanseRequestHead, AnEmptyHeadIsLeftAlone) {
  http::request<http::empty_body> req;
  cleanseRequestHead(req);
  EXPECT_TRUE(req.target().empty());
  EXPECT_EQ(req.begin(), req.end());
}

}  // namespace
}  // namespace sandgate::proxy
