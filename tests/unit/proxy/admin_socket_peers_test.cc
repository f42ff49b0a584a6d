// Who may use the admin socket (proxy/admin/admin_socket.cc): peers that are neither root nor
// in its group are refused, the group is the peer's own, a task's groups narrow it, listeners
// must come from a sandbox namespace or loopback, and the sockets directory must be real.
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
#include "proxy/admin/admin_socket.h"
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

// Runs `body` on a thread of its own that became uid/gid 65534 and returns its result (90: the
// ids could not be changed). Credentials are per thread in the kernel; the raw system calls
// change only this thread's (glibc's wrappers would change every thread's). No fork: its child
// would inherit whatever lock the admin socket's thread held at that moment.
// `groups`: the supplementary groups the thread holds (none by default).
template <typename Body>
int asNobody(Body body, std::vector<gid_t> groups = {}) {
  int result = 90;
  std::thread t([&] {
    if (::syscall(SYS_setgroups, groups.size(), groups.data()) != 0 ||
        ::syscall(SYS_setresgid, 65534, 65534, 65534) != 0 ||
        ::syscall(SYS_setresuid, 65534, 65534, 65534) != 0) {
      return;
    }
    result = body();
  });
  t.join();
  return result;
}

TEST(AdminSocket, PeersThatAreNotRootNorInTheGroupAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another uid";
  TempDir dir;
  FakeBackend fake;
  std::string path = dir.path() + "/admin.sock";
  auto admin = openOrDie(path, fake);
  ASSERT_TRUE(admin);
  // File permissions stop uid 65534 first...
  EXPECT_EQ(asNobody([&] {
              auto c = AdminClient::connect(path);
              return !c.ok() &&
                             c.errorText().find("Permission denied (errno 13)") != std::string::npos
                         ? 0
                         : 1;
            }),
            0);
  // ...and a socket whose mode was loosened by hand still refuses by SO_PEERCRED.
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  EXPECT_EQ(asNobody([&] {
              auto c = AdminClient::connect(path);
              if (!c.ok()) return 2;
              auto env = c.value()->taskEnvironment("t1");
              if (env.ok()) return 3;
              if (env.error().reason != "permission_denied") return 4;
              return env.errorText().find("uid 65534") != std::string::npos ? 0 : 5;
            }),
            0);
}

TEST(AdminSocket, MembersOfTheAdminGroupAreServed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another uid";
  TempDir dir;
  FakeBackend fake;
  std::string path = dir.path() + "/admin.sock";
  auto admin = openOrDie(path, fake, gid_t{65534});
  ASSERT_TRUE(admin);
  EXPECT_EQ(asNobody([&] {
              auto c = AdminClient::connect(path);
              if (!c.ok()) return 2;
              return c.value()->taskEnvironment("t1").ok() ? 0 : 3;
            }),
            0);
}

// The group is checked on the process, not on /etc/group for its uid: holding it as a
// supplementary group is enough, and a process that dropped it is refused whatever the user
// database says (uid 65534 is in no group 4242 anywhere; only the process's own set counts).
TEST(AdminSocket, TheGroupIsThePeersOwnNotItsUsersInTheDatabase) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another uid";
  TempDir dir;
  FakeBackend fake;
  std::string path = dir.path() + "/admin.sock";
  auto admin = openOrDie(path, fake, gid_t{4242});
  ASSERT_TRUE(admin);
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);  // past the file mode: the peer check decides
  auto ask = [&] {
    auto c = AdminClient::connect(path);
    if (!c.ok()) return 2;
    auto env = c.value()->taskEnvironment("t1");
    if (env.ok()) return 0;
    return env.error().reason == "permission_denied" ? 1 : 3;
  };
  EXPECT_EQ(asNobody(ask, {4242}), 0);        // a supplementary group: served
  EXPECT_EQ(asNobody(ask, {1, 4242, 7}), 0);  // among others
  EXPECT_EQ(asNobody(ask), 1);                // dropped: refused
}

// tasks[].admin_groups: a client that is not root must hold one of the task's groups.
TEST(AdminSocket, TaskGroupsNarrowWhoMayUseATask) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another uid";
  TempDir dir;
  FakeBackend fake;
  AdminSocketOptions o;
  o.path = dir.path() + "/admin.sock";
  o.group = 65534;
  auto backend = fake.backend();
  backend.taskGroups = [](const std::string& task) -> std::optional<std::vector<gid_t>> {
    if (task == "t1") return std::vector<gid_t>{4242, 4343};
    return std::nullopt;
  };
  auto admin = AdminSocket::open(o, std::move(backend));
  ASSERT_TRUE(admin.ok()) << admin.errorText();
  admin.value()->start();
  auto ask = [&](const char* task) {
    return [&o, task] {
      auto c = AdminClient::connect(o.path);
      if (!c.ok()) return 2;
      auto env = c.value()->taskEnvironment(task);
      if (env.ok()) return 0;
      if (env.error().reason == "unknown_task") return 4;  // got past the check
      if (env.error().reason != "permission_denied") return 3;
      return env.errorText().find("holds none of task t1's admin_groups (gids 4242, 4343)") !=
                     std::string::npos
                 ? 1
                 : 5;
    };
  };
  EXPECT_EQ(asNobody(ask("t1")), 1);          // in listen.admin_group only
  EXPECT_EQ(asNobody(ask("t1"), {4343}), 0);  // and in one of t1's
  EXPECT_EQ(asNobody(ask("t2")), 4);          // a task without admin_groups
  EXPECT_EQ(ask("t1")(), 0);                  // root may use every task
}

// A listener that a sandbox would not hand over is refused and closed: one in serve's own
// network namespace (it would serve the task on the host's network) or not on loopback.
TEST(AdminSocket, ListenersOutsideASandboxNamespaceOrLoopbackAreRefused) {
  TestNetns sandbox;
  SANDGATE_NETNS_OR_SKIP(sandbox);
  TempDir dir;
  FakeBackend fake;
  std::string path = dir.path() + "/admin.sock";
  auto admin = openOrDie(path, fake);
  ASSERT_TRUE(admin);
  auto client = AdminClient::connect(path);
  ASSERT_TRUE(client.ok()) << client.errorText();

  uint16_t port = 0;
  int own = listenLoopback(&port);  // serve's namespace, 127.0.0.1
  ASSERT_GE(own, 0);
  auto refused = client.value()->adopt("t1", {own});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().reason, "serve_netns");
  EXPECT_NE(refused.errorText().find("serve's own network namespace"), std::string::npos)
      << refused.errorText();
  ::close(own);

  auto anyAddress = [](int family) {
    int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_storage a{};
    a.ss_family = static_cast<sa_family_t>(family);
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 1) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  };
  for (int family : {AF_INET, AF_INET6}) {
    int wildcard = sandbox.run([&] { return anyAddress(family); });
    ASSERT_GE(wildcard, 0);
    auto notLoopback = client.value()->adopt("t1", {wildcard});
    ASSERT_FALSE(notLoopback.ok());
    EXPECT_EQ(notLoopback.error().reason, "not_loopback");
    EXPECT_NE(notLoopback.errorText().find(family == AF_INET ? "bound to 0.0.0.0, not to loopback"
                                                             : "bound to ::, not to loopback"),
              std::string::npos)
        << notLoopback.errorText();
    ::close(wildcard);
  }

  // One run, one sandbox: a second namespace on the same connection is refused too.
  int first = sandbox.run([&] { return listenLoopback(&port); });
  ASSERT_TRUE(client.value()->adopt("t1", {first}).ok());
  ::close(first);
  TestNetns other;
  int second = other.run([&] { return listenLoopback(&port); });
  auto mixed = client.value()->adopt("t1", {second});
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.error().reason, "mixed_netns");
  ::close(second);
  std::lock_guard lock(fake.mu);
  EXPECT_EQ(fake.adoptedTasks.size(), 1u);  // only the sandbox's own listener got through
}

// /run/sandgate is created when missing; a socket's directory that is a symbolic link or that
// others may write is refused.
TEST(AdminSocket, TheSocketsDirectoryMustBeARealDirectoryOnlyItsOwnerWrites) {
  if (::geteuid() != 0) GTEST_SKIP() << "creating /run/sandgate needs root";
  FakeBackend fake;
  std::string sub = "/run/sandgate/unit-" + std::to_string(::getpid());
  std::system(("rm -rf " + sub).c_str());
  {
    auto admin = openOrDie(sub + "/deeper/admin.sock", fake);
    ASSERT_TRUE(admin);
    struct stat st {};
    ASSERT_EQ(::lstat((sub + "/deeper").c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0755u);
    EXPECT_EQ(st.st_uid, 0u);
  }
  std::system(("rm -rf " + sub).c_str());

  TempDir dir;
  ASSERT_EQ(::symlink(dir.path().c_str(), (dir.path() + "/link").c_str()), 0);
  AdminSocketOptions o;
  o.path = dir.path() + "/link/admin.sock";
  auto linked = AdminSocket::open(o, fake.backend());
  ASSERT_FALSE(linked.ok());
  EXPECT_NE(linked.errorText().find("/link is not a directory (a symbolic link is refused too)"),
            std::string::npos)
      << linked.errorText();
  ASSERT_EQ(::chmod(dir.path().c_str(), 0775), 0);
  o.path = dir.path() + "/admin.sock";
  auto open = AdminSocket::open(o, fake.backend());
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.errorText().find("is writable by others than its owner (mode 0775)"),
            std::string::npos)
      << open.errorText();
}

// A real Server: a run's listener is served for the task, counted, and closed on release.
}  // namespace
}  // namespace sandgate::proxy
