// The admin socket's messages, peer check and listener check (proxy/admin/admin_protocol.cc).
#include "proxy/admin/admin_protocol.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>

#include "tests/unit/proxy/test_netns.h"

namespace sandgate::proxy {
namespace {

TEST(AdminProtocol, RequestsRoundTrip) {
  struct Case {
    const char* name;
    AdminRequest request;
    std::string wire;
  };
  const Case cases[] = {
      {"task_env", {AdminOp::kTaskEnv, "t1"}, R"({"v":1,"op":"task_env","task":"t1"})"},
      {"adopt", {AdminOp::kAdopt, "a.b-c_d"}, R"({"v":1,"op":"adopt","task":"a.b-c_d"})"},
      {"release", {AdminOp::kRelease, ""}, R"({"v":1,"op":"release"})"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(encodeRequest(c.request), c.wire);
    auto back = parseRequest(c.wire);
    ASSERT_TRUE(back.ok()) << back.errorText();
    EXPECT_EQ(back->op, c.request.op);
    EXPECT_EQ(back->task, c.request.task);
  }
}

TEST(AdminProtocol, AdoptCaptureRoundTrips) {
  AdminRequest req(AdminOp::kAdoptCapture, "t1");
  req.ports = {80, 443, 8443};
  req.ipv6 = true;
  const std::string wire = R"({"v":1,"op":"adopt_capture","task":"t1","ports":[80,443,8443],)"
                           R"("ipv6":true})";
  EXPECT_EQ(encodeRequest(req), wire);
  auto back = parseRequest(wire);
  ASSERT_TRUE(back.ok()) << back.errorText();
  EXPECT_EQ(back->op, AdminOp::kAdoptCapture);
  EXPECT_EQ(back->task, "t1");
  EXPECT_EQ(back->ports, (std::vector<uint16_t>{80, 443, 8443}));
  EXPECT_TRUE(back->ipv6);
  auto noIpv6 = parseRequest(R"({"v":1,"op":"adopt_capture","task":"t1","ports":[443]})");
  ASSERT_TRUE(noIpv6.ok()) << noIpv6.errorText();
  EXPECT_FALSE(noIpv6->ipv6);
}

// task_env may name the run (serve's audit lines carry it); only task_env carries it.
TEST(AdminProtocol, TaskEnvCarriesTheRunId) {
  AdminRequest req(AdminOp::kTaskEnv, "t1");
  req.run = "20261204-221500-ab12";
  const std::string wire = R"({"v":1,"op":"task_env","task":"t1","run":"20261204-221500-ab12"})";
  EXPECT_EQ(encodeRequest(req), wire);
  auto back = parseRequest(wire);
  ASSERT_TRUE(back.ok()) << back.errorText();
  EXPECT_EQ(back->run, "20261204-221500-ab12");
  auto none = parseRequest(R"({"v":1,"op":"task_env","task":"t1"})");
  ASSERT_TRUE(none.ok()) << none.errorText();
  EXPECT_EQ(none->run, "");
  AdminRequest adopt(AdminOp::kAdopt, "t1");
  adopt.run = "r";
  EXPECT_EQ(encodeRequest(adopt), R"({"v":1,"op":"adopt","task":"t1"})");
  // A run id is a label for log lines: no control bytes, no separators, bounded.
  for (std::string bad : {std::string(R"("a\u001b[2Jb")"), std::string(R"("a b")"),
                          std::string(R"("a/b")"), std::string("7"), std::string(R"("")"),
                          "\"" + std::string(kMaxRunIdBytes + 1, 'r') + "\""}) {
    SCOPED_TRACE(bad);
    auto r = parseRequest(R"({"v":1,"op":"task_env","task":"t1","run":)" + bad + "}");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().reason, admin_reason::kBadRequest);
    EXPECT_NE(r.error().message.find("\"run\" must be a run id"), std::string::npos)
        << r.error().message;
  }
}

TEST(AdminProtocol, BadRequestsNameTheirReason) {
  struct Case {
    const char* name;
    std::string wire;
    std::string_view reason;
    std::string message;  // substring
  };
  const Case cases[] = {
      {"not json", "adopt t1", admin_reason::kBadRequest, "one JSON object"},
      {"array", "[1]", admin_reason::kBadRequest, "one JSON object"},
      {"no version", R"({"op":"adopt","task":"t"})", admin_reason::kUnsupportedVersion,
       "version (none)"},
      {"version 2", R"({"v":2,"op":"adopt","task":"t"})", admin_reason::kUnsupportedVersion,
       "unsupported protocol version 2 (this side speaks 1)"},
      {"version string", R"({"v":"1","op":"adopt","task":"t"})", admin_reason::kUnsupportedVersion,
       "version \"1\""},
      {"unknown op", R"({"v":1,"op":"shutdown"})", admin_reason::kBadRequest,
       "unknown op 'shutdown'"},
      {"missing task", R"({"v":1,"op":"adopt"})", admin_reason::kBadRequest, "needs \"task\""},
      {"task with colon", R"({"v":1,"op":"task_env","task":"a:b"})", admin_reason::kBadRequest,
       "needs \"task\""},
      {"task not string", R"({"v":1,"op":"task_env","task":7})", admin_reason::kBadRequest,
       "needs \"task\""},
      {"too long", std::string(kMaxAdminMessage + 1, ' '), admin_reason::kBadRequest, "exceeds"},
      {"capture without ports", R"({"v":1,"op":"adopt_capture","task":"t"})",
       admin_reason::kBadRequest, "adopt_capture needs \"ports\": 1 to 15 distinct ports"},
      {"capture with no port", R"({"v":1,"op":"adopt_capture","task":"t","ports":[]})",
       admin_reason::kBadRequest, "needs \"ports\""},
      {"capture port 0", R"({"v":1,"op":"adopt_capture","task":"t","ports":[0]})",
       admin_reason::kBadRequest, "needs \"ports\""},
      {"capture port too big", R"({"v":1,"op":"adopt_capture","task":"t","ports":[65536]})",
       admin_reason::kBadRequest, "needs \"ports\""},
      {"capture port 53", R"({"v":1,"op":"adopt_capture","task":"t","ports":[443,53]})",
       admin_reason::kBadRequest, "not 53"},
      {"capture port twice", R"({"v":1,"op":"adopt_capture","task":"t","ports":[443,443]})",
       admin_reason::kBadRequest, "distinct"},
      {"capture port text", R"({"v":1,"op":"adopt_capture","task":"t","ports":["443"]})",
       admin_reason::kBadRequest, "needs \"ports\""},
      {"capture 16 ports",
       R"({"v":1,"op":"adopt_capture","task":"t","ports":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]})",
       admin_reason::kBadRequest, "1 to 15"},
      {"capture ipv6 not bool", R"({"v":1,"op":"adopt_capture","task":"t","ports":[80],"ipv6":1})",
       admin_reason::kBadRequest, "\"ipv6\" must be true or false"},
      {"capture without task", R"({"v":1,"op":"adopt_capture","ports":[80]})",
       admin_reason::kBadRequest, "op adopt_capture needs \"task\""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = parseRequest(c.wire);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().reason, c.reason);
    EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
  }
}

TEST(AdminProtocol, RepliesRoundTrip) {
  AdminReply env;
  env.ok = true;
  env.environment = TaskEnvironment{"agent",
                                    "-----BEGIN CERTIFICATE-----\nMII\n",
                                    {{"OPENAI_API_KEY", "sk-placeholder"}},
                                    {"/run/secret"},
                                    std::nullopt,
                                    std::nullopt};
  auto e = parseReply(encodeReply(env));
  ASSERT_TRUE(e.ok()) << e.errorText();
  ASSERT_TRUE(e->ok);
  ASSERT_TRUE(e->environment.has_value());
  EXPECT_EQ(e->environment->policy, "agent");
  EXPECT_EQ(e->environment->caPem, "-----BEGIN CERTIFICATE-----\nMII\n");
  EXPECT_EQ(e->environment->env.at("OPENAI_API_KEY"), "sk-placeholder");
  EXPECT_EQ(e->environment->hiddenPaths, std::vector<std::string>{"/run/secret"});
  EXPECT_FALSE(e->environment->capture.has_value());        // an older serve's reply reads the same
  EXPECT_FALSE(e->environment->sshKnownHosts.has_value());  // so does one without ssh
  EXPECT_FALSE(e->traffic.has_value());
  EXPECT_FALSE(e->dns.has_value());

  env.environment->capture = CaptureOffer{{80, 443, 8443}, "10.77.0.0/16", "fd00:77::/64"};
  auto c = parseReply(encodeReply(env));
  ASSERT_TRUE(c.ok()) << c.errorText();
  ASSERT_TRUE(c->environment && c->environment->capture);
  EXPECT_EQ(c->environment->capture->ports, (std::vector<uint16_t>{80, 443, 8443}));
  EXPECT_EQ(c->environment->capture->ipv4Range, "10.77.0.0/16");
  EXPECT_EQ(c->environment->capture->ipv6Range, "fd00:77::/64");
  EXPECT_NE(encodeReply(env).find(R"("capture":{"ports":[80,443,8443],"ipv4_range":"10.77.0.0/16",)"
                                  R"("ipv6_range":"fd00:77::/64"})"),
            std::string::npos)
      << encodeReply(env);
  EXPECT_FALSE(
      parseReply(R"({"v":1,"ok":true,"policy":"p","ca_pem":"","capture":{"ports":[]}})").ok());

  // run --proxy's ssh setup: serve's broker key for the policy's SSH hosts.
  env.environment->sshKnownHosts = "git.test ssh-ed25519 AAAAC3Nza\n";
  auto k = parseReply(encodeReply(env));
  ASSERT_TRUE(k.ok()) << k.errorText();
  ASSERT_TRUE(k->environment && k->environment->sshKnownHosts);
  EXPECT_EQ(*k->environment->sshKnownHosts, "git.test ssh-ed25519 AAAAC3Nza\n");

  AdminReply rel;
  rel.ok = true;
  TrafficSummary t;
  t.allowed = 2;
  t.denied = 1;
  t.bytesUp = 10;
  t.bytesDown = 200;
  t.entries.push_back(TrafficEntry{"api.test", 80, "forward", "allow", "rule_allow", 2, 10, 200});
  t.credentials = {"openai"};
  rel.traffic = t;
  rel.dns = CaptureCounts{3, 1, 2, 0, 0, 0, 4, 3};
  rel.dns->hints = {
      "odd.test: the policy allows it on port 17443, which this sandbox does not "
      "capture: add `--capture-port 17443`"};
  auto r = parseReply(encodeReply(rel));
  ASSERT_TRUE(r.ok()) << r.errorText();
  ASSERT_TRUE(r->traffic.has_value());
  EXPECT_EQ(r->traffic->allowed, 2u);
  EXPECT_EQ(r->traffic->denied, 1u);
  EXPECT_EQ(r->traffic->bytesDown, 200u);
  ASSERT_EQ(r->traffic->entries.size(), 1u);
  EXPECT_EQ(r->traffic->entries[0].host, "api.test");
  EXPECT_EQ(r->traffic->entries[0].port, 80);
  EXPECT_EQ(r->traffic->entries[0].count, 2u);
  EXPECT_EQ(r->traffic->credentials, std::vector<std::string>{"openai"});
  EXPECT_FALSE(r->environment.has_value());
  ASSERT_TRUE(r->dns.has_value());
  EXPECT_EQ(r->dns->summary(), rel.dns->summary());
  EXPECT_EQ(boost::json::serialize(captureCountsToJson(*r->dns)),
            R"({"answered":3,"nodata":1,"nxdomain":2,"refused":0,"notimp":0,)"
            R"("pool_exhausted":0,"malformed":4,"names":3,"hints":["odd.test: the policy )"
            R"(allows it on port 17443, which this sandbox does not capture: add )"
            R"(`--capture-port 17443`"]})");
  EXPECT_EQ(r->dns->hints, rel.dns->hints);  // serve's hints reach run --proxy

  // A peer's hints are bounded like the stub's own: kMaxHints, none oversized.
  AdminReply many;
  many.ok = true;
  many.dns = CaptureCounts{};
  many.dns->hints.push_back(std::string(5000, 'x'));
  for (int i = 0; i < 30; ++i) many.dns->hints.push_back("h" + std::to_string(i));
  auto bounded = parseReply(encodeReply(many));
  ASSERT_TRUE(bounded.ok()) << bounded.errorText();
  ASSERT_EQ(bounded->dns->hints.size(), CaptureCounts::kMaxHints);
  EXPECT_EQ(bounded->dns->hints.front(), "h0");

  auto err = parseReply(encodeReply(errorReply(admin_reason::kUnknownTask, "no task 'x'")));
  ASSERT_TRUE(err.ok());
  EXPECT_FALSE(err->ok);
  EXPECT_EQ(err->reason, "unknown_task");
  EXPECT_EQ(err->error, "no task 'x'");
  EXPECT_EQ(encodeReply(errorReply("bad_request", "x")),
            R"({"v":1,"ok":false,"reason":"bad_request","error":"x"})");
}

TEST(AdminProtocol, BadRepliesAreErrors) {
  EXPECT_FALSE(parseReply("").ok());
  auto noOk = parseReply(R"({"v":1})");
  ASSERT_FALSE(noOk.ok());
  EXPECT_EQ(noOk.error().reason, admin_reason::kBadRequest);
  auto version = parseReply(R"({"v":3,"ok":true})");
  ASSERT_FALSE(version.ok());
  EXPECT_EQ(version.error().reason, admin_reason::kUnsupportedVersion);
}

TEST(AdminProtocol, PeerCheck) {
  struct Case {
    const char* name;
    PeerCredentials peer;
    std::optional<gid_t> group;
    bool allowed;
    std::string why;  // substring of the refusal
  };
  const Case cases[] = {
      {"root", {10, 0, 0, {}}, std::nullopt, true, ""},
      {"root with a group configured", {10, 0, 5, {}}, 1000, true, ""},
      {"user without group configured",
       {10, 1000, 1000, {1000}},
       std::nullopt,
       false,
       "uid 1000 (gid 1000, pid 10) is not root (no listen.admin_group is configured)"},
      {"primary gid matches", {10, 1000, 2000, {}}, 2000, true, ""},
      {"supplementary gid matches", {10, 1000, 1000, {1000, 2000, 3000}}, 2000, true, ""},
      {"not a member",
       {10, 65534, 65534, {65534, 3000}},
       2000,
       false,
       "uid 65534 (gid 65534, groups [65534, 3000], pid 10) is neither root nor holds group 2000"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto refused = checkPeer(c.peer, c.group);
    EXPECT_EQ(!refused.has_value(), c.allowed);
    if (refused) {
      EXPECT_NE(refused->find(c.why), std::string::npos) << *refused;
    }
  }
}

TEST(AdminProtocol, TaskPeerCheck) {
  EXPECT_EQ(checkTaskPeer({1, 0, 0, {}}, "t", {7}), std::nullopt);            // root
  EXPECT_EQ(checkTaskPeer({1, 1000, 7, {}}, "t", {5, 7}), std::nullopt);      // its gid
  EXPECT_EQ(checkTaskPeer({1, 1000, 1000, {9, 5}}, "t", {5}), std::nullopt);  // a group
  auto refused = checkTaskPeer({1, 1000, 1000, {9}}, "t", {5, 7});
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->find("holds none of task t's admin_groups (gids 5, 7)"), std::string::npos)
      << *refused;
}

// What the kernel says of the process at the other end: this one's own ids and groups.
TEST(AdminProtocol, PeerCredentialsAreTheKernels) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  auto peer = peerCredentials(pair[0]);
  ASSERT_TRUE(peer.ok()) << peer.errorText();
  EXPECT_EQ(peer->pid, ::getpid());
  EXPECT_EQ(peer->uid, ::geteuid());
  EXPECT_EQ(peer->gid, ::getegid());
  std::vector<gid_t> mine(static_cast<size_t>(::getgroups(0, nullptr)));
  mine.resize(static_cast<size_t>(::getgroups(static_cast<int>(mine.size()), mine.data())));
  auto theirs = peer->groups;
  std::sort(mine.begin(), mine.end());
  std::sort(theirs.begin(), theirs.end());
  EXPECT_EQ(theirs, mine);
  ::close(pair[0]);
  ::close(pair[1]);
  int pipeFds[2];
  ASSERT_EQ(::pipe(pipeFds), 0);
  EXPECT_FALSE(peerCredentials(pipeFds[0]).ok());
  ::close(pipeFds[0]);
  ::close(pipeFds[1]);
}

TEST(AdminProtocol, LoopbackCheck) {
  auto bound = [](int family, const char* ip) {
    int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_storage a{};
    socklen_t len;
    if (family == AF_INET) {
      auto& v4 = reinterpret_cast<sockaddr_in&>(a);
      v4.sin_family = AF_INET;
      ::inet_pton(AF_INET, ip, &v4.sin_addr);
      len = sizeof(v4);
    } else {
      auto& v6 = reinterpret_cast<sockaddr_in6&>(a);
      v6.sin6_family = AF_INET6;
      ::inet_pton(AF_INET6, ip, &v6.sin6_addr);
      len = sizeof(v6);
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  };
  struct Case {
    int family;
    const char* ip;
    bool loopback;
  };
  for (const Case& c : {Case{AF_INET, "127.0.0.1", true}, Case{AF_INET, "127.0.0.53", true},
                        Case{AF_INET, "0.0.0.0", false}, Case{AF_INET6, "::1", true},
                        Case{AF_INET6, "::", false}}) {
    SCOPED_TRACE(c.ip);
    int fd = bound(c.family, c.ip);
    if (fd < 0 && c.family == AF_INET6) continue;  // no IPv6 on this host
    ASSERT_GE(fd, 0);
    auto bad = checkLoopback(fd, "it");
    EXPECT_EQ(!bad, c.loopback);
    if (bad) {
      EXPECT_EQ(bad->reason, "not_loopback");
      EXPECT_NE(bad->message.find(std::string("it is bound to ") + c.ip + ", not to loopback"),
                std::string::npos)
          << bad->message;
    }
    ::close(fd);
  }
}

TEST(AdminProtocol, NetnsCheck) {
  auto serve = ownNetns();
  ASSERT_TRUE(serve.ok()) << serve.errorText();
  int own = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto ns = socketNetns(own);
  if (!ns) GTEST_SKIP() << "SIOCGSKNS needs CAP_NET_ADMIN: " << ns.errorText();
  EXPECT_EQ(ns.value(), serve.value());
  std::optional<NetnsId> first;
  auto bad = checkSandboxNetns({own}, serve.value(), first);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->reason, "serve_netns");
  EXPECT_FALSE(first);

  TestNetns sandbox;
  SANDGATE_NETNS_OR_SKIP(sandbox);
  int a = sandbox.run([] { return ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); });
  int b = sandbox.run([] { return ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0); });
  EXPECT_EQ(checkSandboxNetns({a, b}, serve.value(), first), std::nullopt);
  ASSERT_TRUE(first);  // the connection's namespace from now on
  EXPECT_NE(*first, serve.value());
  bad = checkSandboxNetns({a, own}, serve.value(), first);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->reason, "serve_netns");
  TestNetns other;
  int c = other.run([] { return ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); });
  bad = checkSandboxNetns({c}, serve.value(), first);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->reason, "mixed_netns");
  std::optional<NetnsId> fresh;
  EXPECT_EQ(checkSandboxNetns({c}, serve.value(), fresh), std::nullopt);  // alone, it is fine
  for (int fd : {own, a, b, c}) ::close(fd);
}

TEST(AdminProtocol, ListenerCheck) {
  int listening = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listening, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(listening, 4), 0);
  EXPECT_EQ(checkListenerFd(listening), std::nullopt);

  int bound = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(checkListenerFd(bound), "socket is not listening");
  int udp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  EXPECT_NE(checkListenerFd(udp)->find("is not SOCK_STREAM"), std::string::npos);
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  EXPECT_EQ(checkListenerFd(pair[0]), "socket is not listening");
  int unixListener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un u{};
  u.sun_family = AF_UNIX;  // autobind: an abstract address
  ASSERT_EQ(::bind(unixListener, reinterpret_cast<sockaddr*>(&u), sizeof(sa_family_t)), 0);
  ASSERT_EQ(::listen(unixListener, 1), 0);
  EXPECT_EQ(checkListenerFd(unixListener), "socket is not IPv4 or IPv6");
  int pipeFds[2];
  ASSERT_EQ(::pipe(pipeFds), 0);
  EXPECT_NE(checkListenerFd(pipeFds[0])->find("not a socket"), std::string::npos);
  for (int fd : {listening, bound, udp, pair[0], pair[1], unixListener, pipeFds[0], pipeFds[1]}) {
    ::close(fd);
  }
}

// A loopback socket on an ephemeral port; listening when asked (-1 on failure).
int boundSocket(int type, bool listening) {
  int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      (listening && ::listen(fd, 4) != 0)) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

uint16_t portOf(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

TEST(AdminProtocol, DatagramCheck) {
  int udp = boundSocket(SOCK_DGRAM, false);
  ASSERT_GE(udp, 0);
  EXPECT_EQ(checkDatagramFd(udp), std::nullopt);
  int unbound = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(checkDatagramFd(unbound), "socket is not bound");
  int tcp = boundSocket(SOCK_STREAM, true);
  EXPECT_NE(checkDatagramFd(tcp)->find("is not SOCK_DGRAM"), std::string::npos);
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair), 0);
  EXPECT_EQ(checkDatagramFd(pair[0]), "socket is not IPv4 or IPv6");
  int pipeFds[2];
  ASSERT_EQ(::pipe(pipeFds), 0);
  EXPECT_NE(checkDatagramFd(pipeFds[0])->find("not a socket"), std::string::npos);
  for (int fd : {udp, unbound, tcp, pair[0], pair[1], pipeFds[0], pipeFds[1]}) ::close(fd);
}

TEST(AdminProtocol, CaptureDescriptorsCheck) {
  int udp = boundSocket(SOCK_DGRAM, false);
  int dnsTcp = boundSocket(SOCK_STREAM, true);
  int l1 = boundSocket(SOCK_STREAM, true);
  int l2 = boundSocket(SOCK_STREAM, true);
  int notListening = boundSocket(SOCK_STREAM, false);
  for (int fd : {udp, dnsTcp, l1, l2, notListening}) ASSERT_GE(fd, 0);
  const std::vector<uint16_t> ports = {portOf(l1), portOf(l2)};
  struct Case {
    const char* name;
    std::vector<int> fds;
    std::vector<uint16_t> ports;
    std::string why;  // substring; empty: accepted
  };
  const Case cases[] = {
      {"dns and two listeners", {udp, dnsTcp, l1, l2}, ports, ""},
      {"one listener", {udp, dnsTcp, l1}, ports, ""},
      {"no listener", {udp, dnsTcp}, ports, "2 descriptors attached"},
      {"more than two per port", {udp, dnsTcp, l1, l1, l1}, {portOf(l1)}, "1 to 2 listeners"},
      {"udp and tcp swapped", {dnsTcp, udp, l1}, ports, "the DNS UDP socket: socket type"},
      {"dns tcp not listening",
       {udp, notListening, l1},
       ports,
       "the DNS TCP socket: socket is not listening"},
      {"listener not listening",
       {udp, dnsTcp, notListening},
       {portOf(notListening)},
       "a capture listener: socket is not listening"},
      {"listener on another port", {udp, dnsTcp, l2}, {portOf(l1)}, "is not a capture port"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto why = checkCaptureFds(c.fds, c.ports);
    if (c.why.empty()) {
      EXPECT_EQ(why, std::nullopt) << *why;
    } else {
      ASSERT_TRUE(why.has_value());
      EXPECT_NE(why->find(c.why), std::string::npos) << *why;
    }
  }
  for (int fd : {udp, dnsTcp, l1, l2, notListening}) ::close(fd);
}

}  // namespace
}  // namespace sandgate::proxy
