// In-process Server serving a sandbox's DNS stub sockets and a capture listener handed over
// with Server::adoptCapture (loopback sockets stand in for the sandbox's), and the pure
// captured-HTTP head check. Synthetic addresses themselves need a network namespace: see
// tests/sandbox/test_transparent.py.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "capture/dns_message.h"
#include "config/config.h"
#include "proxy/admin/admin_client.h"
#include "proxy/server/server.h"
#include "proxy/session/transparent.h"
#include "tests/unit/proxy/test_netns.h"
#include "tests/unit/proxy/test_server.h"

namespace sandgate::proxy {
namespace {

std::vector<uint8_t> query(const std::string& name, uint16_t type) {
  std::vector<uint8_t> q = {0xAB, 0xCD, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  auto n = capture::encodeName(name);
  q.insert(q.end(), n.begin(), n.end());
  q.insert(q.end(), {static_cast<uint8_t>(type >> 8), static_cast<uint8_t>(type), 0, 1});
  return q;
}

// One UDP exchange; empty when no answer came within `ms`.
std::vector<uint8_t> udpExchange(uint16_t port, const std::vector<uint8_t>& q, int ms = 3000) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  auto a = loopback(port);
  ::sendto(fd, q.data(), q.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
  std::vector<uint8_t> out(4096);
  ssize_t n = ::recv(fd, out.data(), out.size(), 0);
  ::close(fd);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

class CaptureServerTest : public ServerFixture {
 protected:
  void SetUp() override {
    ServerFixture::SetUp();
    std::string yaml =
        "policies:\n"
        "  p:\n"
        "    allow:\n"
        "      - host: allowed.test\n"
        "tasks:\n"
        "  - name: boxed\n"
        "    policy: p\n" +
        auditConfig();
    auto server = testServer(yaml, "capture.yaml");
    ASSERT_TRUE(server.ok()) << server.errorText();
    server_ = std::move(server.value());
    CaptureSockets s;
    s.dnsUdp = boundLoopback(SOCK_DGRAM, &udpPort_);
    s.dnsTcp = boundLoopback(SOCK_STREAM, &tcpPort_);
    s.listeners.push_back(boundLoopback(SOCK_STREAM, &capturePort_));
    ASSERT_GE(s.dnsUdp, 0);
    ASSERT_GE(s.dnsTcp, 0);
    ASSERT_GE(s.listeners[0], 0);
    CaptureOptions o;
    o.task = "boxed";
    auto ctx = server_->adoptCapture(std::move(s), std::move(o));
    ASSERT_TRUE(ctx.ok()) << ctx.errorText();
    capture_ = ctx->context;
    group_ = ctx->group;
    server_->start();
  }

  uint16_t udpPort_ = 0, tcpPort_ = 0, capturePort_ = 0;
  std::shared_ptr<CaptureContext> capture_;
  uint64_t group_ = 0;
};

TEST_F(CaptureServerTest, UdpAnswersAllowedDeniesOthersDropsMalformed) {
  auto a = udpExchange(udpPort_, query("allowed.test", capture::dns::kTypeA));
  ASSERT_GE(a.size(), 16u);
  EXPECT_EQ(a[0], 0xAB);
  EXPECT_EQ(a[3] & 0x0F, capture::dns::kRcodeNoError);
  EXPECT_EQ(std::vector<uint8_t>(a.end() - 4, a.end()), (std::vector<uint8_t>{198, 18, 0, 1}));
  auto nx = udpExchange(udpPort_, query("denied.test", capture::dns::kTypeA));
  ASSERT_GE(nx.size(), 12u);
  EXPECT_EQ(nx[3] & 0x0F, capture::dns::kRcodeNxDomain);
  auto bad = query("allowed.test", capture::dns::kTypeA);
  bad[5] = 0xFF;  // 255 questions
  EXPECT_TRUE(udpExchange(udpPort_, bad, 300).empty());
  // Still serving after the garbage:
  EXPECT_FALSE(udpExchange(udpPort_, query("allowed.test", capture::dns::kTypeAaaa)).empty());
  auto c = capture_->counts();
  EXPECT_EQ(c.answered, 2u);
  EXPECT_EQ(c.nxdomain, 1u);
  EXPECT_EQ(c.malformed, 1u);
  EXPECT_EQ(c.names, 1u);
  auto audit = auditText();
  EXPECT_NE(audit.find("\"kind\":\"dns\""), std::string::npos) << audit;
  EXPECT_NE(audit.find("\"mode\":\"transparent\""), std::string::npos) << audit;
  EXPECT_NE(audit.find("\"host\":\"denied.test\""), std::string::npos) << audit;
  EXPECT_NE(audit.find("\"reason\":\"nxdomain\""), std::string::npos) << audit;
}

TEST_F(CaptureServerTest, TcpAnswersInOrderAndClosesOnGarbage) {
  auto q1 = query("allowed.test", capture::dns::kTypeA);
  auto q2 = query("other.test", capture::dns::kTypeA);
  std::string wire;
  for (const auto* q : {&q1, &q2}) {
    wire.push_back(static_cast<char>(q->size() >> 8));
    wire.push_back(static_cast<char>(q->size()));
    wire.append(q->begin(), q->end());
  }
  std::string out = tcpExchange(tcpPort_, wire, true);
  ASSERT_GE(out.size(), 4u);
  size_t first = static_cast<uint8_t>(out[0]) << 8 | static_cast<uint8_t>(out[1]);
  ASSERT_GE(out.size(), 2 + first + 2 + 12);
  EXPECT_EQ(out[2 + 3] & 0x0F, capture::dns::kRcodeNoError);
  EXPECT_EQ(out[2 + first + 2 + 3] & 0x0F, capture::dns::kRcodeNxDomain);
  // A length prefix larger than any query: counted and closed without an answer.
  EXPECT_EQ(tcpExchange(tcpPort_, std::string("\xff\xff", 2) + std::string(100, 'x'), true), "");
  EXPECT_EQ(capture_->counts().malformed, 1u);
}

TEST_F(CaptureServerTest, CaptureListenerClosesConnectionsToUnassignedAddresses) {
  // 127.0.0.1 was never handed out: closed at once, nothing sent, nothing dialled.
  EXPECT_EQ(tcpExchange(capturePort_, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", true), "");
  auto audit = auditText();
  EXPECT_NE(audit.find("\"reason\":\"not_a_synthetic_address\""), std::string::npos) << audit;
  EXPECT_NE(audit.find("\"task\":\"boxed\""), std::string::npos) << audit;
}

// What `sandgate serve` does when a run ends (or its launcher dies): the whole capture group
// goes, the DNS stub's sockets with the capture listeners.
TEST_F(CaptureServerTest, ReleaseClosesTheDnsStubAndTheCaptureListeners) {
  ASSERT_FALSE(udpExchange(udpPort_, query("allowed.test", capture::dns::kTypeA)).empty());
  server_->releaseListeners(group_);
  auto refused = [](uint16_t port) {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto a = loopback(port);
    bool r = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0;
    ::close(s);
    return r;
  };
  // Closed on the worker thread: poll (bounded) for the ports to go.
  bool closed = false;
  for (int i = 0; i < 500 && !closed; ++i) {
    closed = refused(tcpPort_) && refused(capturePort_);
    if (!closed) ::usleep(10 * 1000);
  }
  EXPECT_TRUE(closed);
  // The UDP socket is gone too: its port can be bound again.
  int again = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  auto a = loopback(udpPort_);
  bool rebound = false;
  for (int i = 0; i < 500 && !rebound; ++i) {
    rebound = ::bind(again, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    if (!rebound) ::usleep(10 * 1000);
  }
  ::close(again);
  EXPECT_TRUE(rebound);
  EXPECT_EQ(capture_->counts().answered, 1u);  // the counts outlive the sockets
  server_->releaseListeners(group_);           // twice: ignored
}

TEST(CaptureServer, WrongDescriptorsAreRefusedAndClosed) {
  auto server =
      testServer("policies: {p: {allow: []}}\ntasks: [{name: t, policy: p}]\n", "c.yaml", 1);
  ASSERT_TRUE(server.ok()) << server.errorText();
  uint16_t port = 0;
  CaptureSockets s;
  s.dnsUdp = boundLoopback(SOCK_STREAM, &port);  // a TCP listener where UDP belongs
  s.dnsTcp = boundLoopback(SOCK_STREAM, &port);
  s.listeners.push_back(boundLoopback(SOCK_STREAM, &port));
  std::vector<int> fds = {s.dnsUdp, s.dnsTcp, s.listeners[0]};
  CaptureOptions o;
  o.task = "t";
  auto r = server.value()->adoptCapture(std::move(s), std::move(o));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.errorText().find("the DNS UDP socket: socket type 1 is not SOCK_DGRAM"),
            std::string::npos)
      << r.errorText();
  for (int fd : fds) EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "fd " << fd << " left open";
}

// `sandgate run --proxy`: the capture handed over the admin socket is served with the ranges
// serve's config names (said in task_env), counted for the run, and closed with the run.
TEST(CaptureServer, AdminSocketServesACaptureUntilReleaseOrDisconnect) {
  TestNetns sandbox;  // serve refuses sockets from its own network namespace
  SANDGATE_NETNS_OR_SKIP(sandbox);
  char tmpl[] = "/tmp/sandgate-capture-admin-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  // config/ accepts listen.admin under /run/sandgate only.
  const std::string sock = "/run/sandgate/unit-capture-" + std::to_string(::getpid()) + ".sock";
  auto created = testServer("listen: {admin: " + sock +
                                "}\n"
                                "policies: {p: {allow: [{host: allowed.test}]}}\n"
                                "tasks: [{name: t1, policy: p}]\n"
                                "transparent: {ports: [8443], ipv4_range: 10.77.0.0/16}\n"
                                "audit: {path: " +
                                dir + "/audit.log}\n",
                            "admin.yaml");
  ASSERT_TRUE(created.ok()) << created.errorText();
  auto& server = *created.value();
  server.start();

  struct Sandbox {  // loopback stand-ins for a sandbox's DNS stub and capture listener
    TestNetns& ns;
    uint16_t udp = 0, tcp = 0, listener = 0;
    int udpFd = -1, tcpFd = -1, listenerFd = -1;
    explicit Sandbox(TestNetns& ns) : ns(ns) {
      udpFd = ns.run([&] { return boundLoopback(SOCK_DGRAM, &udp); });
      tcpFd = ns.run([&] { return boundLoopback(SOCK_STREAM, &tcp); });
      listenerFd = ns.run([&] { return boundLoopback(SOCK_STREAM, &listener); });
    }
    std::vector<uint8_t> ask(const std::vector<uint8_t>& q) const {
      return ns.run([&] { return udpExchange(udp, q); });
    }
    void closeOurCopies() {
      for (int fd : {udpFd, tcpFd, listenerFd}) ::close(fd);
    }
    // Polls (bounded) until serve holds none of them: the ports refuse or can be bound again.
    bool goneFromServe() const {
      return ns.run([this] { return gone(); });
    }
    bool gone() const {
      for (int i = 0; i < 500; ++i) {
        int t = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        auto a = loopback(tcp), l = loopback(listener);
        bool gone = ::connect(t, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0;
        ::close(t);
        t = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        gone = gone && ::connect(t, reinterpret_cast<sockaddr*>(&l), sizeof(l)) != 0;
        ::close(t);
        int u = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        auto ua = loopback(udp);
        gone = gone && ::bind(u, reinterpret_cast<sockaddr*>(&ua), sizeof(ua)) == 0;
        ::close(u);
        if (gone) return true;
        ::usleep(10 * 1000);
      }
      return false;
    }
  };

  auto client = AdminClient::connect(sock);
  ASSERT_TRUE(client.ok()) << client.errorText();
  auto env = client.value()->taskEnvironment("t1");
  ASSERT_TRUE(env.ok()) << env.errorText();
  ASSERT_TRUE(env->capture.has_value());
  EXPECT_EQ(env->capture->ports, (std::vector<uint16_t>{80, 443, 8443}));
  EXPECT_EQ(env->capture->ipv4Range, "10.77.0.0/16");
  EXPECT_EQ(env->capture->ipv6Range, "fd53:4744:4e53::/64");

  Sandbox box(sandbox);
  auto ports = env->capture->ports;
  ports.push_back(box.listener);  // the launcher's --capture-port
  auto wrongPort = client.value()->adoptCapture("t1", env->capture->ports, false, box.udpFd,
                                                box.tcpFd, {box.listenerFd});
  ASSERT_FALSE(wrongPort.ok());
  EXPECT_EQ(wrongPort.error().reason, "not_a_listener");
  auto adopted =
      client.value()->adoptCapture("t1", ports, false, box.udpFd, box.tcpFd, {box.listenerFd});
  ASSERT_TRUE(adopted.ok()) << adopted.errorText();
  auto twice =
      client.value()->adoptCapture("t1", ports, false, box.udpFd, box.tcpFd, {box.listenerFd});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.errorText().find("adopted a capture already"), std::string::npos)
      << twice.errorText();
  box.closeOurCopies();

  auto a = box.ask(query("allowed.test", capture::dns::kTypeA));
  ASSERT_GE(a.size(), 16u);
  EXPECT_EQ(std::vector<uint8_t>(a.end() - 4, a.end()), (std::vector<uint8_t>{10, 77, 0, 1}));
  auto nx = box.ask(query("denied.test", capture::dns::kTypeA));
  ASSERT_GE(nx.size(), 12u);
  EXPECT_EQ(nx[3] & 0x0F, capture::dns::kRcodeNxDomain);
  auto aaaa = box.ask(query("allowed.test", capture::dns::kTypeAaaa));
  ASSERT_GE(aaaa.size(), 12u);
  EXPECT_EQ(aaaa[7], 0);  // "ipv6": false: no AAAA record, no data

  auto released = client.value()->release();
  ASSERT_TRUE(released.ok()) << released.errorText();
  ASSERT_TRUE(released->dns.has_value());
  EXPECT_EQ(released->dns->answered + released->dns->nodata, 2u);
  EXPECT_EQ(released->dns->nxdomain, 1u);
  EXPECT_EQ(released->dns->names, 1u);
  // The DNS audit records are the run's traffic too, as in an embedded proxy's report.
  bool dnsEntry = false;
  for (const auto& e : released->traffic.entries) {
    dnsEntry = dnsEntry || (e.kind == "dns" && e.host == "denied.test" && e.reason == "nxdomain");
  }
  EXPECT_TRUE(dnsEntry);
  EXPECT_TRUE(box.goneFromServe());

  // A launcher that dies: its connection closes, and the capture goes with it.
  TestNetns secondSandbox;  // another run: its own namespace, on its own connection
  Sandbox second(secondSandbox);
  auto other = AdminClient::connect(sock);
  ASSERT_TRUE(other.ok()) << other.errorText();
  ASSERT_TRUE(other.value()->taskEnvironment("t1").ok());
  ASSERT_TRUE(other.value()
                  ->adoptCapture("t1", {second.listener}, false, second.udpFd, second.tcpFd,
                                 {second.listenerFd})
                  .ok());
  second.closeOurCopies();
  EXPECT_FALSE(second.ask(query("allowed.test", capture::dns::kTypeA)).empty());
  other.value().reset();
  EXPECT_TRUE(second.goneFromServe());

  server.shutdown();
  server.wait();
  std::system(("rm -rf " + dir).c_str());
}

TEST(CapturedHttpHead, HostMustNameTheAddress) {
  CapturedTarget t{"web.test", 80, "198.18.0.1:80", true};
  struct Case {
    const char* label;
    std::string head;
    std::string_view reason;  // empty: accepted
  } cases[] = {
      {"plain", "GET /a?b HTTP/1.1\r\nHost: web.test\r\n\r\n", ""},
      {"with_port", "GET / HTTP/1.1\r\nHost: WEB.test:80\r\n\r\n", ""},
      {"other_name", "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n", reason::kHostMismatch},
      {"other_port", "GET / HTTP/1.1\r\nHost: web.test:8080\r\n\r\n", reason::kHostMismatch},
      {"no_host", "GET / HTTP/1.0\r\n\r\n", reason::kHostMismatch},
      {"absolute_form", "GET http://web.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n",
       reason::kBadTarget},
      {"connect", "CONNECT web.test:443 HTTP/1.1\r\nHost: web.test:443\r\n\r\n",
       reason::kBadTarget},
  };
  for (const auto& c : cases) {
    RequestHead head;
    ASSERT_FALSE(validateRequestHead(c.head, &head)) << c.label;
    auto r = capturedHttpHead(t, &head);
    if (c.reason.empty()) {
      EXPECT_FALSE(r) << c.label << ": " << r->detail;
      EXPECT_EQ(head.form, TargetForm::kAbsolute) << c.label;
      EXPECT_EQ(head.host, "web.test") << c.label;
      EXPECT_EQ(head.port, 80) << c.label;
    } else {
      ASSERT_TRUE(r) << c.label;
      EXPECT_EQ(r->reason, c.reason) << c.label;
    }
  }
}

}  // namespace
}  // namespace sandgate::proxy
