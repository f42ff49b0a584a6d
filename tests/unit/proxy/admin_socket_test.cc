// The admin socket (proxy/admin/admin_socket.cc) with a fake backend and the real client
// (proxy/admin/admin_client.cc), then a real Server serving and releasing a run's listeners.
// Who may use it: admin_socket_peers_test.cc.
#include "proxy/admin/admin_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "broker/placeholder.h"
#include "config/config.h"
#include "proxy/admin/admin_client.h"
#include "proxy/observe/listener_tally.h"
#include "proxy/server/server.h"
#include "tests/unit/proxy/admin_socket_fixture.h"
#include "tests/unit/proxy/test_netns.h"
#include "tests/unit/proxy/test_server.h"

namespace sandgate::proxy {
namespace {

using admin_test::eventually;
using admin_test::FakeBackend;
using admin_test::openOrDie;
using admin_test::TempDir;

TEST(AdminSocket, FileIsRootOnlyAndRemovedOnStop) {
  TempDir dir;
  FakeBackend fake;
  std::string path = dir.path() + "/admin.sock";
  auto admin = openOrDie(path, fake);
  ASSERT_TRUE(admin);
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  admin->stop();
  EXPECT_NE(::lstat(path.c_str(), &st), 0);
}

TEST(AdminSocket, GroupSocketIs0660AndOwnedByTheGroup) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown to another group needs root";
  TempDir dir;
  FakeBackend fake;
  std::string path = dir.path() + "/admin.sock";
  auto admin = openOrDie(path, fake, gid_t{65534});
  ASSERT_TRUE(admin);
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, 65534u);
}

TEST(AdminSocket, StaleSocketIsReplacedOtherFilesAreNot) {
  TempDir dir;
  FakeBackend fake;
  std::string path = dir.path() + "/admin.sock";
  {  // a socket nobody listens on any more
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ::close(fd);
  }
  auto admin = openOrDie(path, fake);
  ASSERT_TRUE(admin);

  AdminSocketOptions o;
  o.path = path;
  auto second = AdminSocket::open(o, fake.backend());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.errorText().find(path + " is in use by another server"), std::string::npos)
      << second.errorText();
  admin->stop();

  std::string file = dir.path() + "/not-a-socket";
  std::ofstream(file) << "keep me\n";
  o.path = file;
  auto refused = AdminSocket::open(o, fake.backend());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.errorText().find("exists and is not a socket; refusing to replace it"),
            std::string::npos)
      << refused.errorText();
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "keep me");

  o.path = dir.path() + "/missing/admin.sock";
  auto noDir = AdminSocket::open(o, fake.backend());
  ASSERT_FALSE(noDir.ok());
  EXPECT_NE(
      noDir.errorText().find("cannot open " + dir.path() + "/missing: No such file or directory"),
      std::string::npos)
      << noDir.errorText();
}

TEST(AdminSocket, RequestsRepliesAndReleaseAtEndOfConnection) {
  TestNetns sandbox;
  SANDGATE_NETNS_OR_SKIP(sandbox);
  TempDir dir;
  FakeBackend fake;
  std::string path = dir.path() + "/admin.sock";
  auto admin = openOrDie(path, fake);
  ASSERT_TRUE(admin);

  auto client = AdminClient::connect(path);
  ASSERT_TRUE(client.ok()) << client.errorText();
  auto env = client.value()->taskEnvironment("t1");
  ASSERT_TRUE(env.ok()) << env.errorText();
  EXPECT_EQ(env->policy, "p");
  EXPECT_EQ(env->caPem, "PEM");
  EXPECT_EQ(env->env.at("KEY"), "placeholder-0");
  EXPECT_EQ(env->hiddenPaths, std::vector<std::string>{"/secret"});

  auto unknown = client.value()->taskEnvironment("nope");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().reason, "unknown_task");
  EXPECT_EQ(unknown.error().message, "no task 'nope'");

  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  auto notListener = client.value()->adopt("t1", {pair[0]});
  ASSERT_FALSE(notListener.ok());
  EXPECT_EQ(notListener.error().reason, "not_a_listener");
  ::close(pair[0]);
  ::close(pair[1]);

  auto none = client.value()->adopt("t1", {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().reason, "bad_request");

  // No capture was offered on this connection: nothing says which ranges it would serve.
  EXPECT_FALSE(env->capture.has_value());
  uint16_t dnsPort = 0;
  int dnsTcp = listenLoopback(&dnsPort);
  auto noOffer = client.value()->adoptCapture("t1", {dnsPort}, false, dnsTcp, dnsTcp, {dnsTcp});
  ::close(dnsTcp);
  ASSERT_FALSE(noOffer.ok());
  EXPECT_EQ(noOffer.error().reason, "bad_request");
  EXPECT_NE(noOffer.errorText().find("needs a task_env reply with \"capture\""), std::string::npos)
      << noOffer.errorText();

  uint16_t port = 0;
  int listener = sandbox.run([&] { return listenLoopback(&port); });
  ASSERT_GE(listener, 0);
  auto adopted = client.value()->adopt("t1", {listener});
  ASSERT_TRUE(adopted.ok()) << adopted.errorText();
  ::close(listener);
  {
    std::lock_guard lock(fake.mu);
    EXPECT_EQ(fake.adoptedTasks, std::vector<std::string>{"t1"});
    EXPECT_EQ(fake.heldFds.size(), 1u);
  }
  EXPECT_EQ(fake.releasedCount(), 0u);
  client.value().reset();  // the launcher is gone: its listeners must be released
  EXPECT_TRUE(eventually([&] { return fake.releasedCount() == 1; }));

  // An explicit release, then end of connection: released once only.
  auto again = AdminClient::connect(path);
  ASSERT_TRUE(again.ok());
  listener = sandbox.run([&] { return listenLoopback(&port); });
  ASSERT_TRUE(again.value()->adopt("t1", {listener}).ok());
  ::close(listener);
  auto released = again.value()->release();
  ASSERT_TRUE(released.ok()) << released.errorText();
  EXPECT_EQ(released->traffic.allowed + released->traffic.denied + released->traffic.other, 0u);
  EXPECT_FALSE(released->dns.has_value());  // no capture was adopted
  EXPECT_EQ(fake.releasedCount(), 2u);
  again.value().reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(fake.releasedCount(), 2u);
}

// Each task_env makes a run's own placeholders: what the same connection adopts for that task
// honours them, what it adopts for another task (or without a task_env) honours none, and
// another connection (another run) gets others. token_env is the token clients' and changes
// nothing for the run.
TEST(AdminSocket, PlaceholdersBelongToTheRunThatAskedForThem) {
  TestNetns sandbox;
  SANDGATE_NETNS_OR_SKIP(sandbox);
  TempDir dir;
  FakeBackend fake;
  std::string path = dir.path() + "/admin.sock";
  auto admin = openOrDie(path, fake);
  ASSERT_TRUE(admin);
  uint16_t port = 0;
  auto adoptOne = [&](AdminClient& client, const std::string& task) {
    int listener = sandbox.run([&] { return listenLoopback(&port); });
    EXPECT_GE(listener, 0);
    auto r = client.adopt(task, {listener});
    ::close(listener);
    return r.ok();
  };

  auto first = AdminClient::connect(path);
  ASSERT_TRUE(first.ok()) << first.errorText();
  ASSERT_TRUE(adoptOne(*first.value(), "t1"));  // before any task_env: none
  auto env1 = first.value()->taskEnvironment("t1");
  ASSERT_TRUE(env1.ok()) << env1.errorText();
  auto token = first.value()->tokenEnvironment("t1");
  ASSERT_TRUE(token.ok()) << token.errorText();
  EXPECT_EQ(token->env.at("KEY"), "token-placeholder");
  EXPECT_TRUE(token->hiddenPaths.empty());
  EXPECT_FALSE(token->capture.has_value());
  ASSERT_TRUE(adoptOne(*first.value(), "t1"));
  ASSERT_TRUE(adoptOne(*first.value(), "t2"));  // its task_env was for t1

  auto second = AdminClient::connect(path);
  ASSERT_TRUE(second.ok()) << second.errorText();
  auto env2 = second.value()->taskEnvironment("t1");
  ASSERT_TRUE(env2.ok()) << env2.errorText();
  EXPECT_NE(env2->env.at("KEY"), env1->env.at("KEY"));
  ASSERT_TRUE(adoptOne(*second.value(), "t1"));

  std::lock_guard lock(fake.mu);
  ASSERT_EQ(fake.made.size(), 2u);
  ASSERT_EQ(fake.adoptedWith.size(), 4u);
  EXPECT_EQ(fake.adoptedWith[0], nullptr);
  EXPECT_EQ(fake.adoptedWith[1], fake.made[0]);
  EXPECT_EQ(fake.adoptedWith[2], nullptr);
  EXPECT_EQ(fake.adoptedWith[3], fake.made[1]);
  EXPECT_EQ(fake.made[0]->all()[0].value, env1->env.at("KEY"));
}

// A release waiting for its run's last session to finish holds up neither the other
// launchers nor itself once the session is done.
TEST(AdminSocket, WaitingReleaseDoesNotHoldUpOtherLaunchers) {
  using Clock = std::chrono::steady_clock;
  TestNetns sandbox;
  SANDGATE_NETNS_OR_SKIP(sandbox);
  TempDir dir;
  FakeBackend fake;
  AdminSocketOptions o;
  o.path = dir.path() + "/admin.sock";
  o.releaseWait = std::chrono::seconds(4);
  auto admin = AdminSocket::open(o, fake.backend());
  ASSERT_TRUE(admin.ok()) << admin.errorText();
  admin.value()->start();

  auto run = AdminClient::connect(o.path);
  ASSERT_TRUE(run.ok()) << run.errorText();
  uint16_t port = 0;
  int listener = sandbox.run([&] { return listenLoopback(&port); });
  ASSERT_GE(listener, 0);
  ASSERT_TRUE(run.value()->adopt("t1", {listener}).ok());
  ::close(listener);
  std::shared_ptr<ListenerTally> tally;
  {
    std::lock_guard lock(fake.mu);
    tally = fake.tally;
  }
  ASSERT_TRUE(tally);
  tally->sessionStarted();  // one of the run's connections has not written its record yet

  std::atomic<bool> released{false};
  Clock::time_point releasedAt;
  std::thread releaser([&] {
    auto r = run.value()->release();
    EXPECT_TRUE(r.ok()) << r.errorText();
    releasedAt = Clock::now();
    released = true;
  });
  // The release has been received (its listeners are closed at once) and is waiting.
  EXPECT_TRUE(eventually([&] { return fake.releasedCount() == 1; }));

  auto other = AdminClient::connect(o.path);
  ASSERT_TRUE(other.ok()) << other.errorText();
  const auto asked = Clock::now();
  auto env = other.value()->taskEnvironment("t1");
  const auto took = Clock::now() - asked;
  ASSERT_TRUE(env.ok()) << env.errorText();
  EXPECT_LT(took, std::chrono::seconds(1));
  EXPECT_FALSE(released.load());  // still waiting for the session

  const auto ended = Clock::now();
  tally->sessionEnded();
  releaser.join();
  ASSERT_TRUE(released.load());
  EXPECT_LT(releasedAt - ended, std::chrono::seconds(1));  // not the 4 s limit
}

TEST(AdminSocket, ConnectErrorsNameThePathAndErrno) {
  TempDir dir;
  auto missing = AdminClient::connect(dir.path() + "/none.sock");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.errorText(),
            "connect to " + dir.path() + "/none.sock: No such file or directory (errno 2)");
}

TEST(AdminSocket, ServerServesTheRunsListenersUntilRelease) {
  TestNetns sandbox;
  SANDGATE_NETNS_OR_SKIP(sandbox);
  TempDir dir;
  // config/ accepts listen.admin under /run/sandgate only.
  std::string path = "/run/sandgate/unit-" + std::to_string(::getpid()) + ".sock";
  std::string yaml = "listen: {admin: " + path + "}\n" +
                     "policies: {p: {allow: []}}\n"
                     "tasks: [{name: t1, policy: p}, {name: t2, policy: p}]\n"
                     "audit: {path: " +
                     dir.path() + "/audit.log}\n";
  auto server = testServer(yaml, "admin.yaml");
  ASSERT_TRUE(server.ok()) << server.errorText();
  server.value()->start();

  auto client = AdminClient::connect(path);
  ASSERT_TRUE(client.ok()) << client.errorText();
  auto env = client.value()->taskEnvironment("t1");
  ASSERT_TRUE(env.ok()) << env.errorText();
  EXPECT_EQ(env->policy, "p");
  EXPECT_NE(env->caPem.find("BEGIN CERTIFICATE"), std::string::npos);  // the ephemeral CA
  EXPECT_NE(std::find(env->hiddenPaths.begin(), env->hiddenPaths.end(), path),
            env->hiddenPaths.end());

  uint16_t port = 0;
  int listener = sandbox.run([&] { return listenLoopback(&port); });
  ASSERT_GE(listener, 0);
  auto unknown = client.value()->adopt("t9", {listener});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().reason, "unknown_task");
  EXPECT_NE(unknown.errorText().find("no task 't9' in admin.yaml (tasks: t1, t2)"),
            std::string::npos)
      << unknown.errorText();
  ASSERT_TRUE(client.value()->adopt("t1", {listener}).ok());
  ::close(listener);  // only the server holds it now

  sockaddr_in a = loopback(port);
  std::string out = sandbox.run([&] {
    return tcpExchange(port, "GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n",
                       false);
  });
  EXPECT_EQ(out.rfind("HTTP/1.1 403 ", 0), 0u) << out;
  EXPECT_NE(out.find("\"task\":\"t1\""), std::string::npos) << out;

  auto released = client.value()->release();
  ASSERT_TRUE(released.ok()) << released.errorText();
  const auto& traffic = released->traffic;
  EXPECT_EQ(traffic.denied, 1u);
  ASSERT_EQ(traffic.entries.size(), 1u);
  EXPECT_EQ(traffic.entries[0].host, "denied.test");
  EXPECT_EQ(traffic.entries[0].reason, "no_matching_rule");

  // Released: nobody holds the listener any more, so the port refuses connections.
  EXPECT_TRUE(eventually([&] {
    return sandbox.run([&] {
      int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      bool refused = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0;
      ::close(s);
      return refused;
    });
  }));

  server.value()->shutdown();
  server.value()->wait();
  struct stat st {};
  EXPECT_NE(::lstat(path.c_str(), &st), 0) << "the admin socket outlived the server";
}

}  // namespace
}  // namespace sandgate::proxy
