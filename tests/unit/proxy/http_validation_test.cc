// Table-driven tests of the strict request-head rules (proxy/client/http_validation.h).
#include "proxy/client/http_validation.h"

#include <gtest/gtest.h>

#include <string>

namespace sandgate::proxy {
namespace {

struct Case {
  const char* name;
  std::string head;
  std::string_view reason;  // empty: valid
};

// Names the case in failure messages and test listings instead of dumping its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string req(std::string line, std::string fields = "Host: a.test\r\n") {
  return line + "\r\n" + fields + "\r\n";
}

class HeadTest : public ::testing::TestWithParam<Case> {};

TEST_P(HeadTest, Reason) {
  const auto& c = GetParam();
  RequestHead head;
  auto e = validateRequestHead(c.head, &head);
  if (c.reason.empty()) {
    EXPECT_FALSE(e.has_value()) << e->reason << ": " << e->detail;
  } else {
    ASSERT_TRUE(e.has_value()) << "accepted";
    EXPECT_EQ(e->reason, c.reason) << e->detail;
  }
}

const Case kCases[] = {
    {"plain_get", req("GET http://a.test/x HTTP/1.1"), ""},
    {"get_with_port", req("GET http://a.test:8080/ HTTP/1.1", "Host: a.test:8080\r\n"), ""},
    {"http10_no_host", req("GET http://a.test/ HTTP/1.0", ""), ""},
    {"http11_no_host", req("GET http://a.test/ HTTP/1.1", ""), reason::kMissingHost},
    {"http11_origin_no_host", req("GET /x HTTP/1.1", ""), reason::kMissingHost},
    {"connect", req("CONNECT a.test:443 HTTP/1.1", "Host: a.test:443\r\n"), ""},
    {"connect_v6", req("CONNECT [::1]:443 HTTP/1.1", ""), ""},
    {"connect_decimal_ip", req("CONNECT 2130706433:443 HTTP/1.1", ""), ""},
    {"origin_form_parses", req("GET / HTTP/1.1"), ""},
    {"chunked",
     req("POST http://a.test/ HTTP/1.1", "Host: a.test\r\nTransfer-Encoding: chunked\r\n"), ""},
    {"content_length", req("POST http://a.test/ HTTP/1.1", "Host: a.test\r\nContent-Length: 5\r\n"),
     ""},
    {"obs_text_in_value", req("GET http://a.test/ HTTP/1.1", "Host: a.test\r\nX: caf\xc3\xa9\r\n"),
     ""},
    {"host_case_insensitive", req("GET http://A.test/ HTTP/1.1", "Host: a.TEST\r\n"), ""},

    {"cl_and_te",
     req("POST http://a.test/ HTTP/1.1",
         "Host: a.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
     reason::kAmbiguousFraming},
    {"duplicate_cl",
     req("POST http://a.test/ HTTP/1.1",
         "Host: a.test\r\nContent-Length: 5\r\nContent-Length: 5\r\n"),
     reason::kBadContentLength},
    {"cl_list", req("POST http://a.test/ HTTP/1.1", "Host: a.test\r\nContent-Length: 5, 5\r\n"),
     reason::kBadContentLength},
    {"cl_non_numeric",
     req("POST http://a.test/ HTTP/1.1", "Host: a.test\r\nContent-Length: 0x5\r\n"),
     reason::kBadContentLength},
    {"cl_negative", req("POST http://a.test/ HTTP/1.1", "Host: a.test\r\nContent-Length: -1\r\n"),
     reason::kBadContentLength},
    {"cl_plus", req("POST http://a.test/ HTTP/1.1", "Host: a.test\r\nContent-Length: +5\r\n"),
     reason::kBadContentLength},
    {"te_gzip_last",
     req("POST http://a.test/ HTTP/1.1", "Host: a.test\r\nTransfer-Encoding: chunked, gzip\r\n"),
     reason::kBadTransferEncoding},
    {"te_identity",
     req("POST http://a.test/ HTTP/1.1", "Host: a.test\r\nTransfer-Encoding: identity\r\n"),
     reason::kBadTransferEncoding},
    {"te_chunked_twice",
     req("POST http://a.test/ HTTP/1.1",
         "Host: a.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"),
     reason::kBadTransferEncoding},
    {"te_in_http10", req("POST http://a.test/ HTTP/1.0", "Transfer-Encoding: chunked\r\n"),
     reason::kBadTransferEncoding},
    {"te_xchunked",
     req("POST http://a.test/ HTTP/1.1", "Host: a.test\r\nTransfer-Encoding: xchunked\r\n"),
     reason::kBadTransferEncoding},
    {"obs_fold", req("GET http://a.test/ HTTP/1.1", "Host: a.test\r\nX-A: one\r\n two\r\n"),
     reason::kObsFold},
    {"obs_fold_tab", req("GET http://a.test/ HTTP/1.1", "Host: a.test\r\nX-A: one\r\n\ttwo\r\n"),
     reason::kObsFold},
    {"space_before_colon", req("GET http://a.test/ HTTP/1.1", "Host: a.test\r\nX-A : v\r\n"),
     reason::kBadHeader},
    {"ctl_in_value",
     req("GET http://a.test/ HTTP/1.1", std::string("Host: a.test\r\nX-A: a\x01b\r\n")),
     reason::kBadHeader},
    {"nul_in_value",
     req("GET http://a.test/ HTTP/1.1", std::string("Host: a.test\r\nX-A: a\0b\r\n", 24)),
     reason::kBadHeader},
    {"del_in_value", req("GET http://a.test/ HTTP/1.1", "Host: a.test\r\nX-A: a\x7f\r\n"),
     reason::kBadHeader},
    {"ctl_in_name",
     req("GET http://a.test/ HTTP/1.1",
         "Host: a.test\r\nX\x01"
         "A: v\r\n"),
     reason::kBadHeader},
    {"no_colon", req("GET http://a.test/ HTTP/1.1", "Host: a.test\r\nXA\r\n"), reason::kBadHeader},
    {"connect_no_port", req("CONNECT a.test HTTP/1.1", ""), reason::kBadTarget},
    {"connect_path", req("CONNECT http://a.test:443/ HTTP/1.1", ""), reason::kBadAuthority},
    {"connect_port_zero", req("CONNECT a.test:0 HTTP/1.1", ""), reason::kBadPort},
    {"connect_port_big", req("CONNECT a.test:65536 HTTP/1.1", ""), reason::kBadPort},
    {"connect_port_empty", req("CONNECT a.test: HTTP/1.1", ""), reason::kBadPort},
    {"connect_userinfo", req("CONNECT user@a.test:443 HTTP/1.1", ""), reason::kBadAuthority},
    {"connect_with_cl_body", req("CONNECT a.test:443 HTTP/1.1", "Content-Length: 3\r\n"),
     reason::kConnectWithBody},
    {"connect_with_te", req("CONNECT a.test:443 HTTP/1.1", "Transfer-Encoding: chunked\r\n"),
     reason::kConnectWithBody},
    {"connect_cl_zero_ok", req("CONNECT a.test:443 HTTP/1.1", "Content-Length: 0\r\n"), ""},
    {"host_mismatch", req("GET http://a.test/ HTTP/1.1", "Host: b.test\r\n"),
     reason::kHostMismatch},
    {"host_port_mismatch", req("GET http://a.test:81/ HTTP/1.1", "Host: a.test\r\n"),
     reason::kHostMismatch},
    {"duplicate_host", req("GET http://a.test/ HTTP/1.1", "Host: a.test\r\nHost: a.test\r\n"),
     reason::kDuplicateHost},
    {"https_scheme", req("GET https://a.test/ HTTP/1.1"), reason::kBadScheme},
    {"ftp_scheme", req("GET ftp://a.test/ HTTP/1.1"), reason::kBadScheme},
    {"userinfo", req("GET http://u:p@a.test/ HTTP/1.1"), reason::kBadAuthority},
    {"backslash", req("GET http://a.test\\@b.test/ HTTP/1.1"), reason::kBadAuthority},
    {"hash_in_authority", req("GET http://a.test#@b.test/ HTTP/1.1"), reason::kBadAuthority},
    {"percent_in_authority", req("GET http://a%2etest/ HTTP/1.1"), reason::kBadAuthority},
    {"non_ascii_target", req("GET http://caf\xc3\xa9.test/ HTTP/1.1"), reason::kBadTarget},
    {"port_zero", req("GET http://a.test:0/ HTTP/1.1"), reason::kBadPort},
    {"port_too_big", req("GET http://a.test:70000/ HTTP/1.1"), reason::kBadPort},
    {"fragment", req("GET http://a.test/x#y HTTP/1.1"), reason::kBadTarget},
    {"two_proxy_auth",
     req("GET http://a.test/ HTTP/1.1",
         "Host: a.test\r\nProxy-Authorization: Basic eDp5\r\nProxy-Authorization: Basic eDp5\r\n"),
     reason::kDuplicateProxyAuthorization},
    {"lowercase_method_is_a_method", req("get http://a.test/ HTTP/1.1"), ""},
    {"http2_version", req("GET http://a.test/ HTTP/2.0"), reason::kBadRequestLine},
    {"extra_space", req("GET  http://a.test/ HTTP/1.1"), reason::kBadRequestLine},
    {"bad_method_char", req("GE(T http://a.test/ HTTP/1.1"), reason::kBadRequestLine},
};

INSTANTIATE_TEST_SUITE_P(Cases, HeadTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(HeadTest, ExtractsTarget) {
  RequestHead h;  // views into the text it validated: keep each text alive while checking
  std::string head = req("GET http://A.test:8080/p/q?x=1 HTTP/1.1",
                         "Host: a.test:8080\r\n"
                         "Proxy-Authorization: Basic dDp0\r\nContent-Length: 0\r\n");
  ASSERT_FALSE(validateRequestHead(head, &h));
  EXPECT_EQ(h.form, TargetForm::kAbsolute);
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.host, "A.test");
  EXPECT_EQ(h.port, 8080);
  EXPECT_EQ(h.path, "/p/q");
  EXPECT_EQ(h.pathAndQuery, "/p/q?x=1");
  EXPECT_EQ(h.proxyAuthorization, "Basic dDp0");
  EXPECT_FALSE(h.hasBody);

  std::string connect = req("CONNECT [::1]:8443 HTTP/1.1", "");
  ASSERT_FALSE(validateRequestHead(connect, &h));
  EXPECT_EQ(h.form, TargetForm::kAuthority);
  EXPECT_EQ(h.host, "[::1]");
  EXPECT_EQ(h.port, 8443);

  std::string query = req("GET http://a.test?q HTTP/1.1");
  ASSERT_FALSE(validateRequestHead(query, &h));
  EXPECT_EQ(h.port, 80);
  EXPECT_EQ(h.path, "/");
  EXPECT_EQ(h.pathAndQuery, "?q");
}

TEST(FindHeadEnd, FindsAndRejects) {
  EXPECT_EQ(findHeadEnd("GET / HTTP/1.1\r\n\r\nbody", 0), 18);
  EXPECT_EQ(findHeadEnd("GET / HTTP/1.1\r\nHost: x\r\n", 0), 0);
  // Terminator split across two reads.
  std::string s = "GET / HTTP/1.1\r\n\r";
  EXPECT_EQ(findHeadEnd(s, 0), 0);
  s += "\n";
  EXPECT_EQ(findHeadEnd(s, 17), 18);
  EXPECT_EQ(findHeadEnd("GET / HTTP/1.1\n\n", 0), -1);         // bare LF
  EXPECT_EQ(findHeadEnd("GET / HTTP/1.1\rX\r\n\r\n", 0), -1);  // bare CR
}

}  // namespace
}  // namespace sandgate::proxy
