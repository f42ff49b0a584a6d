// End-to-end tests of sandbox::run(): namespaces, proxy hand-off, network, environment,
// filesystem view, limits, seccomp, exit statuses and cleanup (as root, and rootless in a child).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "sandbox/environment.h"
#include "sandbox/filesystem.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace sandgate::sandbox {
namespace {

using testing::Captured;
using testing::FakeProxy;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::runCaptured;
using testing::shell;
using testing::TempDir;

constexpr uid_t kTestUid = 4242;  // owns the workspaces: the sandbox maps to it

#define REQUIRE_ROOT() \
  if (!testing::isRoot()) GTEST_SKIP() << "needs root (creates cgroups, maps another uid)"

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A workspace owned by kTestUid inside a fresh temp dir under `base`.
struct Workspace {
  explicit Workspace(const std::string& base = "/var/tmp") : dir(base), path(dir.path() + "/ws") {
    std::filesystem::create_directory(path);
    if (chown(path.c_str(), kTestUid, kTestUid) != 0) std::abort();
  }
  TempDir dir;
  std::string path;
};

const RunResult& ok(const Captured& c) {
  EXPECT_TRUE(c.result.ok()) << c.result.errorText();
  if (!c.result.ok()) throw std::runtime_error("run() failed: " + c.result.errorText());
  return *c.result;
}

std::string describe(const Captured& c) {
  if (!c.result.ok()) return "error: " + c.result.errorText();
  return std::string("end=") + endName(c.result->end) +
         " status=" + std::to_string(c.result->exitStatus) + " error=" + c.result->error +
         "\nstdout:\n" + c.out + "\nstderr:\n" + c.err;
}

TEST(SandboxRun, ProxySocketReachesTheCallback) {
  REQUIRE_ROOT();
  Workspace ws;
  FakeProxy proxy;
  auto c = runCaptured(shell("curl -sS --max-time 10 -x http://127.0.0.1:3128 http://x.test/a && "
                             "curl -sS --max-time 10 -x 'http://[::1]:3128' http://x.test/b && "
                             "curl -sS --max-time 10 http://x.test/env",
                             ws.path),
                       &proxy);
  const auto& r = ok(c);
  ASSERT_EQ(r.exitStatus, 0) << describe(c);
  EXPECT_EQ(proxy.listenerCount(), 2u);
  EXPECT_THAT(c.out, HasSubstr(std::string(FakeProxy::kMarker) + " GET http://x.test/a HTTP/1.1"));
  EXPECT_THAT(c.out, HasSubstr(std::string(FakeProxy::kMarker) + " GET http://x.test/b HTTP/1.1"));
  // The environment's HTTP_PROXY alone leads there too.
  EXPECT_THAT(c.out, HasSubstr("GET http://x.test/env HTTP/1.1"));
  EXPECT_EQ(proxy.requests().size(), 3u);
  // A uid leased from sandgate's range, not the workspace owner's.
  EXPECT_GE(r.uid, 0x7E000000u);
  EXPECT_LT(r.uid, 0x7E000000u + 65536);
}

TEST(SandboxRun, OtherConnectionsFailAtOnce) {
  REQUIRE_ROOT();
  Workspace ws;
  // A server on the host's loopback: the sandbox must not reach it.
  int srv = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(srv, 8), 0);
  socklen_t len = sizeof a;
  getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  // 192.0.2.1 / 2001:db8::1 are documentation addresses, dialled only inside the new network
  // namespace, which has no route: nothing can leave.
  std::string py =
      "import socket,time\n"
      "for fam,host,port in [(socket.AF_INET,'127.0.0.1'," +
      std::to_string(port) +
      "),"
      "(socket.AF_INET,'192.0.2.1',80),(socket.AF_INET6,'2001:db8::1',443)]:\n"
      "  s=socket.socket(fam); s.settimeout(5); t=time.time()\n"
      "  try:\n"
      "    s.connect((host,port)); print(host,'CONNECTED')\n"
      "  except OSError as e:\n"
      "    print(host,'errno',e.errno,'fast' if time.time()-t<1 else 'slow')\n";
  // sh -c 'script' arg0: pass the Python program as $0.
  Options o =
      shell("/usr/bin/python3 -c \"$0\"; getent hosts example.com; echo getent=$?", ws.path);
  o.argv.push_back(py);
  auto c = runCaptured(o, nullptr);
  ok(c);
  EXPECT_THAT(c.out, HasSubstr("127.0.0.1 errno 111 fast")) << describe(c);  // ECONNREFUSED
  EXPECT_THAT(c.out, HasSubstr("192.0.2.1 errno 101 fast")) << describe(c);  // ENETUNREACH
  EXPECT_THAT(c.out, HasSubstr("2001:db8::1 errno 101 fast")) << describe(c);
  EXPECT_THAT(c.out, Not(HasSubstr("CONNECTED")));
  EXPECT_THAT(c.out, HasSubstr("getent=2")) << describe(c);  // no DNS: key not found
  EXPECT_LT(accept(srv, nullptr, nullptr), 0);               // the host server saw nothing
  close(srv);
}

TEST(SandboxRun, EnvironmentHoldsOnlyAllowedVariables) {
  REQUIRE_ROOT();
  Workspace ws;
  setenv("SANDGATE_TEST_SECRET", "must-not-leak", 1);
  Options o = shell(
      "env; echo ---; cat \"$SSL_CERT_FILE\" | tail -3; echo ---; "
      "tail -3 /etc/ssl/certs/ca-certificates.crt",
      ws.path);
  o.env = {{"OPENAI_API_KEY", "sandgate-placeholder-1"}};
  o.extraCaPem = "-----BEGIN CERTIFICATE-----\nSANDGATETESTCA\n-----END CERTIFICATE-----\n";
  auto c = runCaptured(o, nullptr);
  ASSERT_EQ(ok(c).exitStatus, 0) << describe(c);
  unsetenv("SANDGATE_TEST_SECRET");
  std::set<std::string> allowed = {
      "PATH",           "LANG",       "TERM",        "HOME",     "HTTP_PROXY",
      "HTTPS_PROXY",    "http_proxy", "https_proxy", "NO_PROXY", "no_proxy",
      "OPENAI_API_KEY", "PWD",        "SHLVL",       "_"};  // last 3: sh's own
  for (const auto& v : caBundleVariables()) allowed.insert(v);
  std::map<std::string, std::string> env;
  std::istringstream in(c.out);
  std::string line;
  while (std::getline(in, line) && line != "---") {
    auto eq = line.find('=');
    ASSERT_NE(eq, std::string::npos) << line;
    env[line.substr(0, eq)] = line.substr(eq + 1);
    EXPECT_TRUE(allowed.contains(line.substr(0, eq))) << "unexpected variable: " << line;
  }
  EXPECT_EQ(env["HTTP_PROXY"], "http://127.0.0.1:3128");
  EXPECT_EQ(env["https_proxy"], "http://127.0.0.1:3128");
  EXPECT_EQ(env["NO_PROXY"], "localhost,127.0.0.1,::1");
  EXPECT_EQ(env["OPENAI_API_KEY"], "sandgate-placeholder-1");
  EXPECT_EQ(env["SSL_CERT_FILE"], kCaBundlePath);
  EXPECT_EQ(env["NODE_EXTRA_CA_CERTS"], kCaBundlePath);
  EXPECT_EQ(env["HOME"], "/tmp/home");
  EXPECT_THAT(c.out, Not(HasSubstr("must-not-leak")));
  // Both the named bundle and the system path end with sandgate's CA.
  auto first = c.out.find("SANDGATETESTCA");
  ASSERT_NE(first, std::string::npos) << describe(c);
  EXPECT_NE(c.out.find("SANDGATETESTCA", first + 1), std::string::npos) << describe(c);
}

TEST(SandboxRun, SecretsAreHiddenAndTheLauncherInvisible) {
  REQUIRE_ROOT();
  Workspace ws;
  // A directory the view shows on purpose (readOnlyPaths): only hiding can hide what is in it.
  std::string home = ws.dir.path() + "/home";
  std::filesystem::create_directories(home + "/.ssh");
  std::filesystem::create_directories(home + "/secrets");
  std::ofstream(home + "/.ssh/id_ed25519") << "PRIVATE-KEY";
  std::ofstream(home + "/secrets/netrc") << "machine x password NETRC-SECRET";
  std::ofstream(home + "/secrets/sibling") << "SIBLING-SECRET";
  std::ofstream(home + "/visible.txt") << "VISIBLE";
  for (const char* p :
       {"/secrets/netrc", "/secrets/sibling", "/.ssh", "/.ssh/id_ed25519", "/secrets", ""}) {
    std::filesystem::permissions(home + p, std::filesystem::perms::all);
  }
  Options o =
      shell("cat " + home + "/visible.txt; echo; ls -A " + home + "/.ssh; echo ssh-listed; cat " +
                home + "/secrets/netrc " + home + "/secrets/sibling; ls -A " + home +
                "/secrets; echo netrc-read; ls -A /root; echo root-listed; "
                "cat /proc/1/environ >/dev/null 2>&1 && echo ENVIRON-READABLE; "
                "cat /proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]*$'; ps -e -o pid=,comm=",
            ws.path);
  o.readOnlyPaths = {home};
  o.hiddenPaths = {home + "/.ssh", home + "/secrets/netrc"};
  auto c = runCaptured(o, nullptr);
  ASSERT_EQ(ok(c).exitStatus, 0) << describe(c);
  EXPECT_THAT(c.out, HasSubstr("VISIBLE"));  // the directory itself is visible: hiding is real
  EXPECT_THAT(c.out, HasSubstr("\nssh-listed\n")) << describe(c);  // listed nothing
  EXPECT_THAT(c.out, Not(HasSubstr("id_ed25519")));
  EXPECT_THAT(c.out, Not(HasSubstr("NETRC-SECRET")));
  // A secret file hides the directory that holds it, its siblings with it.
  EXPECT_THAT(c.out, Not(HasSubstr("SIBLING-SECRET")));
  EXPECT_THAT(c.out, HasSubstr("\nnetrc-read\nroot-listed\n")) << describe(c);
  EXPECT_THAT(c.out, Not(HasSubstr("ENVIRON-READABLE")));
  EXPECT_THAT(c.out, HasSubstr("sandgate-init"));
  // PID 1, sh, and ls/grep or ps: a handful of processes, never the host's.
  std::istringstream in(c.out.substr(c.out.find("sandgate-init")));
  std::string skip, count;
  std::getline(in, skip);
  std::getline(in, count);
  EXPECT_LE(std::stoi(count), 5) << describe(c);
  std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(rest, HasSubstr("1 sandgate-init"));
  EXPECT_THAT(rest, Not(HasSubstr("sandbox_test")));
}

TEST(SandboxRun, RootIsReadOnlyWorkspaceWritable) {
  REQUIRE_ROOT();
  Workspace ws;
  std::string outside = ws.dir.path() + "/outside";
  std::filesystem::create_directory(outside);
  ASSERT_EQ(chown(outside.c_str(), kTestUid, kTestUid), 0);  // writable for that uid on the host
  // A host submount (writable tmpfs, owned by the sandbox uid): the recursive bind must have
  // remounted it read-only too.
  std::string sub = ws.dir.path() + "/submount";
  std::filesystem::create_directory(sub);
  ASSERT_EQ(mount("tmpfs", sub.c_str(), "tmpfs", 0, "mode=0777"), 0);
  auto c = runCaptured(shell("touch /usr/sandgate-ro-test 2>&1; echo usr=$?; touch " + outside +
                                 "/x 2>&1; echo outside=$?; touch " + sub +
                                 "/x 2>&1; echo submount=$?; echo data > inside.txt; echo ws=$?; "
                                 "pwd; echo tmp > /tmp/t && echo tmp-ok; echo h > $HOME/h && "
                                 "echo home-ok",
                             ws.path),
                       nullptr);
  ASSERT_EQ(ok(c).exitStatus, 0) << describe(c);
  EXPECT_THAT(c.out, HasSubstr("usr=1"));
  EXPECT_THAT(c.out, HasSubstr("Read-only file system"));
  EXPECT_THAT(c.out, HasSubstr("outside=1"));
  EXPECT_THAT(c.out, HasSubstr("submount=1"));
  EXPECT_FALSE(std::filesystem::exists(sub + "/x"));
  umount2(sub.c_str(), MNT_DETACH);
  EXPECT_THAT(c.out, HasSubstr("ws=0"));
  EXPECT_THAT(c.out, HasSubstr(ws.path + "\n"));
  EXPECT_THAT(c.out, HasSubstr("tmp-ok"));
  EXPECT_THAT(c.out, HasSubstr("home-ok"));
  EXPECT_EQ(slurp(ws.path + "/inside.txt"), "data\n");
  EXPECT_FALSE(std::filesystem::exists(outside + "/x"));
  EXPECT_FALSE(std::filesystem::exists("/usr/sandgate-ro-test"));
}

TEST(SandboxRun, WorkspaceUnderTmpWorks) {
  REQUIRE_ROOT();
  Workspace ws("/tmp");
  std::ofstream(ws.path + "/before.txt") << "BEFORE";
  auto c =
      runCaptured(shell("pwd; cat before.txt; echo; echo after > after.txt", ws.path), nullptr);
  ASSERT_EQ(ok(c).exitStatus, 0) << describe(c);
  EXPECT_THAT(c.out, HasSubstr(ws.path + "\nBEFORE"));
  EXPECT_EQ(slurp(ws.path + "/after.txt"), "after\n");
}

TEST(SandboxRun, ExitStatusPropagates) {
  REQUIRE_ROOT();
  Workspace ws;
  auto c = runCaptured(shell("exit 7", ws.path), nullptr);
  EXPECT_EQ(ok(c).exitStatus, 7);
  EXPECT_EQ(c.result->end, RunResult::End::kExited);
  c = runCaptured(shell("kill -9 $$", ws.path), nullptr);
  EXPECT_EQ(ok(c).exitStatus, 137);
  EXPECT_EQ(c.result->end, RunResult::End::kSignaled);
  Options o = shell("", ws.path);
  o.argv = {"no-such-command-sandgate"};
  c = runCaptured(o, nullptr);
  EXPECT_EQ(ok(c).exitStatus, kExitNotFound);
  EXPECT_THAT(c.result->error, HasSubstr("execve(2) failed: ENOENT"));
}

TEST(SandboxRun, SetupFailureNamesStepCallAndErrno) {
  REQUIRE_ROOT();
  Workspace ws;
  Options o = shell("echo SHOULD-NOT-RUN", ws.path);
  o.hostname = std::string(100, 'h');  // longer than HOST_NAME_MAX: sethostname says EINVAL
  auto c = runCaptured(o, nullptr);
  EXPECT_EQ(ok(c).exitStatus, kExitSetupFailed);
  EXPECT_EQ(c.result->end, RunResult::End::kSetupFailed);
  EXPECT_EQ(c.result->error,
            "sandbox: set hostname: sethostname(2) failed: EINVAL (Invalid argument)");
  EXPECT_THAT(c.out, Not(HasSubstr("SHOULD-NOT-RUN")));
}

TEST(SandboxRun, FailedProxyHandOffStopsBeforeTheCommand) {
  REQUIRE_ROOT();
  Workspace ws;
  auto c = runCaptured(shell("echo SHOULD-NOT-RUN > ran.txt", ws.path), nullptr);
  ASSERT_EQ(ok(c).exitStatus, 0);  // control: the command does run when the hand-off works
  ASSERT_TRUE(std::filesystem::remove(ws.path + "/ran.txt"));
  Options o = shell("echo SHOULD-NOT-RUN > ran.txt", ws.path);
  o.stdoutFd = o.stderrFd = -1;
  auto r = run(o, [](std::vector<int> fds) {
    for (int fd : fds) close(fd);
    throw std::runtime_error("adoptListener refused");
  });
  ASSERT_TRUE(r.ok()) << r.errorText();
  EXPECT_EQ(r->end, RunResult::End::kSetupFailed);
  EXPECT_EQ(r->exitStatus, kExitSetupFailed);
  EXPECT_EQ(r->error, "sandbox: proxy hand-off failed: adoptListener refused");
  EXPECT_FALSE(std::filesystem::exists(ws.path + "/ran.txt"));
}

// The child of a multithreaded process can hang forever on a lock another thread held at the
// fork: run() refuses to fork with other threads running, and the StartedCallback (called
// right after the fork, before the hand-off) is where the proxy starts its threads.
TEST(SandboxRun, ForksSingleThreadedAndStartsThreadsAfterTheFork) {
  REQUIRE_ROOT();
  Workspace ws;
  Options o = shell("echo ran > ran.txt", ws.path);
  o.stdoutFd = o.stderrFd = -1;
  auto closeAll = [](std::vector<int> fds) {
    for (int fd : fds) close(fd);
  };
  // join() returns when the thread has cleared its tid, a moment before the kernel drops it
  // from the process's thread count: wait (bounded) for the count the next run checks.
  auto waitForOneThread = [] {
    for (int i = 0; i < 200 && threadCount() != 1; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(threadCount(), 1);
  };
  ASSERT_EQ(threadCount(), 1);
  {
    std::promise<void> release;
    std::thread other([f = release.get_future()]() mutable { f.wait(); });
    auto r = run(o, closeAll);
    release.set_value();
    other.join();
    waitForOneThread();
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.errorText(), HasSubstr("refusing to fork the sandbox from a process with 2 "
                                         "threads"));
    EXPECT_FALSE(std::filesystem::exists(ws.path + "/ran.txt"));
  }
  std::vector<std::string> events;
  std::promise<void> release;
  std::thread started;
  auto r = run(
      o,
      [&](std::vector<int> fds) {
        events.push_back("listeners, threads " + std::to_string(threadCount().value_or(0)));
        closeAll(std::move(fds));
      },
      {},
      [&] {
        events.push_back("started, threads " + std::to_string(threadCount().value_or(0)));
        started = std::thread([f = release.get_future()]() mutable { f.wait(); });
      });
  release.set_value();
  if (started.joinable()) started.join();
  waitForOneThread();
  ASSERT_TRUE(r.ok()) << r.errorText();
  EXPECT_EQ(r->exitStatus, 0) << r->error;
  EXPECT_EQ(events, (std::vector<std::string>{"started, threads 1", "listeners, threads 2"}));
  EXPECT_TRUE(std::filesystem::remove(ws.path + "/ran.txt"));

  r = run(o, closeAll, {}, [] { throw std::runtime_error("no threads today"); });
  ASSERT_TRUE(r.ok()) << r.errorText();
  EXPECT_EQ(r->end, RunResult::End::kSetupFailed);
  EXPECT_EQ(r->error, "sandbox: starting the proxy failed: no threads today");
  EXPECT_FALSE(std::filesystem::exists(ws.path + "/ran.txt"));
}

TEST(SandboxRun, TimeoutKillsTheSandbox) {
  REQUIRE_ROOT();
  Workspace ws;
  Options o = shell("sleep 30 & sleep 30", ws.path);
  o.timeout = std::chrono::seconds(1);
  auto c = runCaptured(o, nullptr);
  EXPECT_EQ(ok(c).exitStatus, kExitTimeout);
  EXPECT_EQ(c.result->end, RunResult::End::kTimeout);
  EXPECT_LT(c.result->seconds, 10);
  EXPECT_GE(c.result->seconds, 0.9);
}

TEST(SandboxRun, MemoryLimitKills) {
  REQUIRE_ROOT();
  Workspace ws;
  Options o = shell("", ws.path);
  o.argv = {"/usr/bin/python3", "-c",
            "b = bytearray(200 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
            "print('SURVIVED')"};
  o.memoryBytes = 64ull << 20;
  auto c = runCaptured(o, nullptr);
  const auto& r = ok(c);
  EXPECT_EQ(r.end, RunResult::End::kMemoryLimit) << describe(c);
  EXPECT_EQ(r.exitStatus, 137);
  EXPECT_THAT(c.out, Not(HasSubstr("SURVIVED")));
  ASSERT_TRUE(r.peakMemoryBytes.has_value());
  EXPECT_LE(*r.peakMemoryBytes, 64ull << 20);
  EXPECT_GT(*r.peakMemoryBytes, 8ull << 20);
}

TEST(SandboxRun, PidsLimitStopsAForkBomb) {
  REQUIRE_ROOT();
  Workspace ws;
  Options o = shell("", ws.path);
  o.argv = {"/usr/bin/python3", "-c",
            "import os, time\nkids = 0\nfor i in range(100):\n  try:\n    p = os.fork()\n"
            "  except OSError as e:\n    print('fork refused', e.errno); break\n"
            "  if p == 0:\n    time.sleep(20); os._exit(0)\n  kids += 1\nprint('kids', kids)"};
  o.pids = 32;
  auto c = runCaptured(o, nullptr);
  const auto& r = ok(c);
  EXPECT_EQ(r.exitStatus, 0) << describe(c);
  EXPECT_THAT(c.out, HasSubstr("fork refused 11")) << describe(c);  // EAGAIN
  EXPECT_TRUE(r.pidsLimitReached);
  EXPECT_LT(r.seconds, 15);  // the sleeping children died with the sandbox's PID 1
}

TEST(SandboxRun, PrivilegesAreDroppedAndSyscallsRefused) {
  REQUIRE_ROOT();
  Workspace ws;
  // Control run on the host (as root, unfiltered): the probe's arguments are invalid, so the
  // kernel answers something other than EPERM — which makes the in-sandbox EPERM meaningful.
  std::map<std::string, int> control;
  {
    FILE* p = popen(SECCOMP_PROBE " --host", "r");
    ASSERT_NE(p, nullptr);
    char name[64];
    int err;
    for (int i = 0; i < 100 && fscanf(p, "%63s %d", name, &err) == 2; ++i) control[name] = err;
    pclose(p);
  }
  ASSERT_GE(control.size(), 35u);
  // The build tree may lie under /tmp, which the sandbox replaces: run a copy from the
  // workspace, and fail loudly (not with zeros) if the probe did not run.
  const std::string probe = ws.path + "/seccomp_probe";
  std::filesystem::copy_file(SECCOMP_PROBE, probe);
  std::filesystem::permissions(
      probe, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                 std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                 std::filesystem::perms::others_exec);
  auto c = runCaptured(
      shell(probe + " && grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status", ws.path), nullptr);
  ASSERT_EQ(ok(c).exitStatus, 0) << describe(c);
  std::map<std::string, int> inside;
  std::istringstream in(c.out);
  std::string name;
  int err;
  for (int i = 0; i < 100 && in >> name >> err; ++i) inside[name] = err;
  auto expected = [](const std::string& n) {
    if (n == "clone3") return ENOSYS;
    if (n.starts_with("socket") && n != "socket_inet_raw") return EAFNOSUPPORT;  // by family
    return EPERM;
  };
  int distinguished = 0;
  for (const auto& [n, e] : control) {
    if (n == "socket_inet_stream" || n == "socket_unix_stream" || n == "socketpair_unix" ||
        n == "fork") {
      EXPECT_EQ(inside[n], 0) << n << " must keep working";
      continue;
    }
    EXPECT_EQ(inside[n], expected(n)) << n << " inside the sandbox";
    if (e != expected(n)) ++distinguished;
  }
  EXPECT_GE(distinguished, 31) << "the probe's control run should not already see the refusals";
  // Not run on the host (they would load kernel modules there): no control to compare with.
  for (const char* n : {"socket_vsock", "socketpair_vsock", "socket_alg", "socket_tipc",
                        "socket_rds", "socket_kcm", "socket_bluetooth", "socket_can"}) {
    ASSERT_TRUE(inside.count(n)) << n << " missing from the probe's output:\n" << c.out;
    EXPECT_EQ(inside[n], EAFNOSUPPORT) << n << " inside the sandbox";
  }
  for (const char* f : {"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000",
                        "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000",
                        "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"}) {
    EXPECT_THAT(c.out, HasSubstr(f));
  }
}

int countSandgateCgroups() {
  int n = 0;
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it("/sys/fs/cgroup", ec), end;
  for (int i = 0; it != end && i < 200000; it.increment(ec), ++i) {
    if (ec) break;
    if (it.depth() > 6) it.disable_recursion_pending();
    if (it->is_directory(ec) && it->path().filename().string().rfind("sandgate-", 0) == 0) ++n;
  }
  return n;
}

std::vector<pid_t> childrenOf(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = slurp(e.path().string() + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream f(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    f >> state >> ppid;
    if (ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

TEST(SandboxRun, NothingIsLeftBehindAfterFiftyRuns) {
  REQUIRE_ROOT();
  Workspace ws;
  const std::string mountsBefore = slurp("/proc/self/mountinfo");
  const int cgroupsBefore = countSandgateCgroups();
  for (int i = 0; i < 50; ++i) {
    Options o = shell("sleep 5 & true", ws.path);  // a background process must die too
    o.memoryBytes = 256ull << 20;
    o.pids = 64;
    auto c = runCaptured(o, nullptr);
    ASSERT_EQ(ok(c).exitStatus, 0) << describe(c);
    ASSERT_LT(c.result->seconds, 4) << "the background sleep kept the run alive";
  }
  EXPECT_EQ(countSandgateCgroups(), cgroupsBefore);
  EXPECT_EQ(slurp("/proc/self/mountinfo"), mountsBefore);
  EXPECT_TRUE(childrenOf(getpid()).empty());
}

// Rootless: a forked child becomes uid 65534, gid 65533 (different numbers, as on most real
// machines: nothing may use one for the other) and runs the sandbox; the verdict comes back
// through the exit status (0 pass, 77 skip, else fail) and a message on a pipe.
TEST(SandboxRun, RootlessWhereTheKernelAllowsIt) {
  REQUIRE_ROOT();  // to become 65534 we start as root; rootless runs are covered by this child
  TempDir base;
  std::string ws = base.path() + "/ws";
  std::filesystem::create_directory(ws);
  ASSERT_EQ(chown(ws.c_str(), 65534, 65533), 0);
  int pipefd[2];
  ASSERT_EQ(pipe2(pipefd, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipefd[0]);
    auto say = [&](int code, const std::string& msg) {
      (void)!write(pipefd[1], msg.data(), msg.size());
      _exit(code);
    };
    if (setgroups(0, nullptr) != 0 || setresgid(65533, 65533, 65533) != 0 ||
        setresuid(65534, 65534, 65534) != 0) {
      say(1, "could not become 65534:65533");
    }
    FakeProxy proxy;
    Options o = shell(
        "id -u; id -g; stat -c %u:%g .; curl -sS --max-time 10 http://x.test/rootless; "
        "ls -A /root; touch /usr/x 2>/dev/null || echo ro-ok; echo w > f && echo ws-ok",
        ws);
    auto c = runCaptured(o, &proxy);
    if (!c.result.ok()) say(1, c.result.errorText());
    if (c.result->end == RunResult::End::kSetupFailed &&
        c.result->error.find("create namespaces: unshare") != std::string::npos) {
      say(77, "kernel refused an unprivileged user namespace: " + c.result->error);
    }
    std::string want[] = {"65534\n65533\n65534:65533\n", "GET http://x.test/rootless", "ro-ok",
                          "ws-ok"};
    for (const auto& w : want) {
      if (c.out.find(w) == std::string::npos) say(1, "missing '" + w + "' in: " + describe(c));
    }
    if (c.result->exitStatus != 0) say(1, describe(c));
    say(0, "");
  }
  close(pipefd[1]);
  std::string msg;
  char buf[4096];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof buf)) > 0;)
    msg.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st)) << msg;
  if (WEXITSTATUS(st) == 77) GTEST_SKIP() << msg;
  EXPECT_EQ(WEXITSTATUS(st), 0) << msg;
}

TEST(SandboxRun, RootlessRefusesLimitsItCannotEnforce) {
  REQUIRE_ROOT();
  TempDir base;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
        setresuid(65534, 65534, 65534) != 0) {
      _exit(1);
    }
    Options o = shell("true", base.path());
    o.memoryBytes = 64ull << 20;
    auto r = run(o, [](std::vector<int> fds) {
      for (int fd : fds) close(fd);
    });
    // uid 65534 cannot create cgroups here (v1 hierarchies are root's, v2 has no controllers).
    if (r.ok() || r.errorText().find("refusing to start") == std::string::npos ||
        r.errorText().find("memory") == std::string::npos) {
      _exit(2);
    }
    o.allowUnenforced = true;  // runs, and says what it did not enforce
    r = run(o, [](std::vector<int> fds) {
      for (int fd : fds) close(fd);
    });
    _exit(r.ok() && r->exitStatus == 0 && r->unenforced.size() == 1 &&
                  r->unenforced[0].rfind("memory: ", 0) == 0
              ? 0
              : 3);
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0)
      << "2: a rootless run with an unenforceable memory limit did not refuse; 3: "
         "allowUnenforced did not run or did not report the memory limit as unenforced";
}

TEST(SandboxRun, RefusesUidZeroAndBadWorkspaces) {
  Options o = shell("true", "/");
  auto r = run(o, [](std::vector<int>) {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.errorText(), HasSubstr("refusing the workspace /: it is a system or shared"));
  o.workspace = "/nonexistent-sandgate";
  r = run(o, [](std::vector<int>) {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.errorText(), HasSubstr("openat2(2) failed: ENOENT"));
  if (testing::isRoot()) {
    TempDir d;
    o.workspace = d.path();
    o.uid = 0;
    r = run(o, [](std::vector<int>) {});
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.errorText(), HasSubstr("uid 0 refused"));
  }
}

// A secret that the host replaces while a sandbox runs (a rename over it, as an editor or a
// secret manager does, and Kubernetes' ..data swap) stays hidden: its directory is hidden, not
// the file's inode.
TEST(SandboxRun, RotatedSecretStaysHidden) {
  REQUIRE_ROOT();
  Workspace ws;
  std::string shown = ws.dir.path() + "/shown";
  std::string secrets = shown + "/creds";
  std::filesystem::create_directories(secrets + "/..2026_12_01");
  std::ofstream(secrets + "/..2026_12_01/key") << "OLD-SECRET";
  std::filesystem::create_directory_symlink("..2026_12_01", secrets + "/..data");
  std::filesystem::create_symlink("..data/key", secrets + "/key");
  std::ofstream(shown + "/plain-key") << "OLD-PLAIN";
  for (const auto& p : {shown, secrets, secrets + "/..2026_12_01"}) {
    std::filesystem::permissions(p, std::filesystem::perms::all);
  }
  Options o = shell(
      "touch started; i=0; while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; "
      "cat " +
          secrets + "/key " + secrets + "/..data/key " + shown + "/plain-key 2>&1; ls -A " +
          secrets + "; echo listed",
      ws.path);
  o.readOnlyPaths = {shown};
  o.hiddenPaths = {secrets + "/key"};
  // The host side of the rotation runs in a process of its own (run() forks only from a
  // single-threaded process): once the command has started, a new timestamped directory, an
  // atomic swap of ..data, and `go`.
  const std::string rotate =
      "cd " + secrets + " && i=0; while [ ! -e " + ws.path +
      "/started ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; mkdir ..2026_12_02 && "
      "echo NEW-SECRET > ..2026_12_02/key && chmod -R a+rwX ..2026_12_02 && "
      "ln -s ..2026_12_02 ..data_tmp && mv -T ..data_tmp ..data && touch " +
      ws.path + "/go";
  pid_t rotator = fork();
  ASSERT_GE(rotator, 0);
  if (rotator == 0) {
    execl("/bin/sh", "sh", "-c", rotate.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  auto c = runCaptured(o, nullptr);
  int st = 0;
  ASSERT_EQ(waitpid(rotator, &st, 0), rotator);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the rotation failed";
  ASSERT_EQ(slurp(secrets + "/key"), "NEW-SECRET\n");  // the host did rotate
  ASSERT_EQ(ok(c).exitStatus, 0) << describe(c);
  EXPECT_THAT(c.out, Not(HasSubstr("OLD-SECRET")));
  EXPECT_THAT(c.out, Not(HasSubstr("NEW-SECRET")));
  EXPECT_THAT(c.out, HasSubstr("OLD-PLAIN"));  // the rest of the shown directory is there
  EXPECT_THAT(c.out, HasSubstr("OLD-PLAINlisted\n")) << describe(c);  // the directory is empty
}

// What readOnlyPaths adds is visible and read-only; a file directly in /etc hides only itself,
// and the plan says so.
TEST(FilesystemPlan, SecretDirectlyInASystemDirectoryWarns) {
  EXPECT_EQ(hidingPathFor("/etc/openai-key").path, "/etc/openai-key");
  EXPECT_FALSE(hidingPathFor("/etc/openai-key").whole);
  EXPECT_EQ(hidingPathFor("/etc/sandgate/key").path, "/etc/sandgate");
  EXPECT_EQ(hidingPathFor("/var/run/secrets/x/..data/key").path, "/var/run/secrets/x");
  EXPECT_EQ(hidingPathFor("/s/..2026/key").path, "/s");
  EXPECT_EQ(hidingPathFor("/key").path, "/key");
}

}  // namespace
}  // namespace sandgate::sandbox
