// The admin socket's messages, peer check and listener check (proxy/admin_protocol.cc).
#include "proxy/admin_protocol.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = parseRequest(c.wire);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.errors().front().keyPath, c.reason);
    EXPECT_NE(r.errors().front().message.find(c.message), std::string::npos)
        << r.errors().front().message;
  }
}

TEST(AdminProtocol, RepliesRoundTrip) {
  AdminReply env;
  env.ok = true;
  env.environment = TaskEnvironment{"agent",
                                    "-----BEGIN CERTIFICATE-----\nMII\n",
                                    {{"OPENAI_API_KEY", "sk-placeholder"}},
                                    {"/run/secret"}};
  auto e = parseReply(encodeReply(env));
  ASSERT_TRUE(e.ok()) << e.errorText();
  ASSERT_TRUE(e->ok);
  ASSERT_TRUE(e->environment.has_value());
  EXPECT_EQ(e->environment->policy, "agent");
  EXPECT_EQ(e->environment->caPem, "-----BEGIN CERTIFICATE-----\nMII\n");
  EXPECT_EQ(e->environment->env.at("OPENAI_API_KEY"), "sk-placeholder");
  EXPECT_EQ(e->environment->hiddenPaths, std::vector<std::string>{"/run/secret"});
  EXPECT_FALSE(e->traffic.has_value());

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

  auto err = parseReply(encodeReply(errorReply(admin_reason::kUnknownTask, "no task 'x'")));
  ASSERT_TRUE(err.ok());
  EXPECT_FALSE(err->ok);
  EXPECT_EQ(err->reason, "unknown_task");
  EXPECT_EQ(err->error, "no task 'x'");
  EXPECT_EQ(encodeReply(errorReply("bad_request", "x")),
            R"({"v":1,"ok":false,"reason":"bad_request","error":"x"})");
}

TEST(AdminProtocol, BadRepliesAreDiagnostics) {
  EXPECT_FALSE(parseReply("").ok());
  EXPECT_FALSE(parseReply(R"({"v":1})").ok());
  EXPECT_FALSE(parseReply(R"({"v":3,"ok":true})").ok());
}

TEST(AdminProtocol, PeerCheck) {
  struct Case {
    const char* name;
    PeerCredentials peer;
    std::optional<gid_t> group;
    std::vector<gid_t> supplementary;
    bool allowed;
    std::string why;  // substring of the refusal
  };
  const Case cases[] = {
      {"root", {10, 0, 0}, std::nullopt, {}, true, ""},
      {"root with a group configured", {10, 0, 5}, 1000, {}, true, ""},
      {"user without group configured",
       {10, 1000, 1000},
       std::nullopt,
       {1000},
       false,
       "uid 1000 (gid 1000, pid 10) is not root (no listen.admin_group is configured)"},
      {"primary gid matches", {10, 1000, 2000}, 2000, {}, true, ""},
      {"supplementary gid matches", {10, 1000, 1000}, 2000, {1000, 2000, 3000}, true, ""},
      {"not a member",
       {10, 65534, 65534},
       2000,
       {65534, 3000},
       false,
       "uid 65534 (gid 65534, pid 10) is neither root nor a member of group 2000"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto refused = checkPeer(c.peer, c.group, c.supplementary);
    EXPECT_EQ(!refused.has_value(), c.allowed);
    if (refused) {
      EXPECT_NE(refused->find(c.why), std::string::npos) << *refused;
    }
  }
}

TEST(AdminProtocol, GroupsOfRootIncludeItsPrimaryGroup) {
  auto groups = groupsOfUser(0, 0);
  EXPECT_NE(std::find(groups.begin(), groups.end(), 0u), groups.end());
  EXPECT_TRUE(groupsOfUser(4000000000u, 4000000000u).empty());  // no passwd entry
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

}  // namespace
}  // namespace sandgate::proxy
