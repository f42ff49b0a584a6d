// run/proxy_connect: the proxy URL from the environment and the CONNECT answer's head.
#include "run/proxy_connect.h"

#include <gtest/gtest.h>

namespace sandgate::run {
namespace {

using Env = std::map<std::string, std::string, std::less<>>;

TEST(ProxyConnect, ProxyFromEnvironmentInOrder) {
  auto p = proxyFromEnvironment(
      Env{{"ALL_PROXY", "http://10.0.0.1:1"}, {"https_proxy", "http://127.0.0.1:3128"}});
  ASSERT_TRUE(p) << p.errors().front().message;
  EXPECT_EQ(p->host, "127.0.0.1");
  EXPECT_EQ(p->port, "3128");
  EXPECT_FALSE(p->authorization);
  auto none = proxyFromEnvironment(Env{{"HTTPS_PROXY", ""}, {"HTTP_PROXY", "http://a:1"}});
  ASSERT_FALSE(none);
  EXPECT_NE(none.errors().front().message.find("no proxy"), std::string::npos);
}

TEST(ProxyConnect, UserinfoIsBasicAuthorization) {
  // task:token, percent-decoded (a token may hold reserved characters).
  auto p = parseProxyUrl("http://agent:t%40ken@proxy.internal:8080");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->host, "proxy.internal");
  EXPECT_EQ(p->port, "8080");
  ASSERT_TRUE(p->authorization);
  EXPECT_EQ(*p->authorization, "Basic YWdlbnQ6dEBrZW4=");  // agent:t@ken
  auto v6 = parseProxyUrl("http://[::1]:3128/");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
}

TEST(ProxyConnect, RefusesUrlsThatCannotCarryAConnect) {
  for (const char* url : {"https://127.0.0.1:3128", "socks5://127.0.0.1:1080", "127.0.0.1:3128",
                          "http://127.0.0.1:3128/path", "http://127.0.0.1:3128?q", "http://"}) {
    EXPECT_FALSE(parseProxyUrl(url)) << url;
  }
}

TEST(ProxyConnect, AnswerHead) {
  auto ok = parseAnswerHead("HTTP/1.1 200 Connection established\r\n\r\n");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  auto refused = parseAnswerHead(
      "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"
      "x-sandgate-reason:  host_not_allowed \r\n\r\n");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403);
  EXPECT_EQ(refused->reason, "host_not_allowed");
  // A hostile or broken proxy: no status line, a bad status, a line without a colon.
  for (const char* head :
       {"", "\r\n\r\n", "SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n", "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "HTTP/2 200\r\n\r\n"}) {
    EXPECT_FALSE(parseAnswerHead(head)) << head;
  }
}

TEST(ProxyConnect, RefusalMessageEscapesWhatTheProxySaid) {
  ConnectAnswer a{403, "host_not_allowed\x1b[2J", "no rule\r\nforged: line"};
  std::string msg = refusalMessage("git.test:22", a);
  EXPECT_EQ(msg.find('\x1b'), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find("403 host_not_allowed"), std::string::npos) << msg;
}

}  // namespace
}  // namespace sandgate::run
