// Override parameters in a query or a urlencoded form body, and which bodies are forms
// (proxy/exchange/headers.h, proxy/exchange/form_gate.h; issue #38 item 4).
#include "proxy/exchange/headers.h"

#include <gtest/gtest.h>

#include <string>

#include "proxy/exchange/form_gate.h"

namespace sandgate::proxy {
namespace {

namespace http = boost::beast::http;

TEST(OverrideParameter, FoundInAnySpellingAFrameworkReads) {
  struct Case {
    const char* pairs;
    const char* name;  // nullptr: none
  };
  const Case cases[] = {
      {"_method=DELETE", "?_method"},
      {"a=1&_method=DELETE", "?_method"},
      {"a=1;_method=PUT", "?_method"},
      {"%5Fmethod=DELETE", "?_method"},
      {"%5fmethod=DELETE", "?_method"},
      {"_method[]=DELETE", "?_method"},
      {"+_method+=DELETE", "?_method"},
      {"_METHOD=DELETE", "?_METHOD"},
      {"X-HTTP-Method-Override=DELETE", "?X-HTTP-Method-Override"},
      {"x_original_url=/admin", "?x_original_url"},
      {"_method", "?_method"},
      {"method=DELETE", nullptr},
      {"a=_method", nullptr},
      {"_methods=DELETE", nullptr},
      {"", nullptr},
      {"%zz=1&x=%", nullptr},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.pairs);
    std::string name;
    const bool found = findOverrideParameter(c.pairs, name);
    EXPECT_EQ(found, c.name != nullptr);
    if (c.name) {
      EXPECT_EQ(name, c.name);
    }
  }
}

TEST(OverrideParameter, FormBodies) {
  auto head = [](http::verb method, const char* type) {
    http::request_header<> h;
    h.method(method);
    if (type) h.set(http::field::content_type, type);
    return h;
  };
  EXPECT_TRUE(isFormBody(head(http::verb::post, "application/x-www-form-urlencoded")));
  EXPECT_TRUE(
      isFormBody(head(http::verb::put, "Application/X-WWW-Form-Urlencoded; charset=utf-8")));
  EXPECT_TRUE(isFormBody(head(http::verb::post, nullptr)));  // Rack reads it as a form
  EXPECT_FALSE(isFormBody(head(http::verb::put, nullptr)));
  EXPECT_FALSE(isFormBody(head(http::verb::post, "application/json")));
  EXPECT_FALSE(isFormBody(head(http::verb::post, "multipart/form-data; boundary=x")));
}

}  // namespace
}  // namespace sandgate::proxy
