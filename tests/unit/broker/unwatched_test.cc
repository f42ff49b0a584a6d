// Tests for the mode without inotify: PathWatch says why it cannot watch, and FileSource keeps
// working on stat(2), logs the degraded mode at warn (and its end at info) and counts it.
//
// The kernel's inotify limits are set per user namespace (/proc/sys/user/max_inotify_*): each
// test runs its body in a child process, in a new user namespace whose limits it lowers. The
// host's limits are never touched. The child reports what it saw as text; the parent asserts.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "broker/path_watch.h"
#include "broker/source.h"
#include "tests/unit/broker/test_util.h"

namespace sandgate::broker {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::writeFile;

bool writeText(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// What the child saw: its report, or why the scenario could not be set up (a skip).
struct ChildRun {
  std::string report;
  std::string skip;
};

// Runs `body` in a child process inside a new user namespace whose inotify limits are
// `instances` and `watches`; `body` returns its report.
ChildRun inNamespaceWithLimits(int instances, int watches,
                               const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {{}, std::string("pipe: ") + std::strerror(errno)};
  const pid_t pid = ::fork();
  if (pid < 0) return {{}, std::string("fork: ") + std::strerror(errno)};
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    const uid_t uid = ::geteuid();
    const gid_t gid = ::getegid();
    if (::unshare(CLONE_NEWUSER) != 0) {
      out = std::string("SKIP unshare(CLONE_NEWUSER): ") + std::strerror(errno);
    } else if (!writeText("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
               !writeText("/proc/self/setgroups", "deny") ||
               !writeText("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1")) {
      out = std::string("SKIP user namespace id maps: ") + std::strerror(errno);
    } else if (!writeText("/proc/sys/user/max_inotify_instances", std::to_string(instances)) ||
               !writeText("/proc/sys/user/max_inotify_watches", std::to_string(watches))) {
      out = std::string("SKIP setting this namespace's inotify limits: ") + std::strerror(errno);
    } else {
      out = body();
    }
    [[maybe_unused]] auto n = ::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) got.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    got += " (child ended abnormally: status " + std::to_string(status) + ")";
  }
  if (got.rfind("SKIP ", 0) == 0) return {{}, got.substr(5)};
  return {got, {}};
}

// The default logger, replaced for the child's life by one that writes into `lines`.
void captureLog(std::ostringstream& lines) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines);
  sink->set_pattern("%l %v");
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
}

std::string stateName(PathWatch::State s) {
  switch (s) {
    case PathWatch::State::kQuiet:
      return "quiet";
    case PathWatch::State::kChanged:
      return "changed";
    case PathWatch::State::kUnavailable:
      return "unavailable";
  }
  return "?";
}

// A PathWatch armed twice under these limits: "state|state|failure()". The second arm() comes
// within the second after a failure, so it does not try again and says why as before.
ChildRun armTwice(int instances, int watches) {
  TempDir dir;
  writeFile(dir.file("s"), "x\n");
  return inNamespaceWithLimits(instances, watches, [&] {
    PathWatch w(dir.file("s"));
    const std::string first = stateName(w.arm());
    return first + "|" + stateName(w.arm()) + "|" + w.failure();
  });
}

TEST(Unwatched, NoInotifyInstanceOrWatchLeftIsExplained) {
  struct Case {
    int instances, watches;
    std::string report;
  };
  const Case cases[] = {
      {0, 8192,
       "unavailable|unavailable|inotify_init1: Too many open files (limits: sysctl "
       "fs.inotify.max_user_instances, and the process's open files)"},
      {128, 0,
       "unavailable|unavailable|inotify_add_watch /: No space left on device (limit: sysctl "
       "fs.inotify.max_user_watches)"},
  };
  for (const auto& c : cases) {
    ChildRun run = armTwice(c.instances, c.watches);
    if (!run.skip.empty()) GTEST_SKIP() << "inotify limits not lowered: " << run.skip;
    EXPECT_EQ(run.report, c.report) << c.instances << " instances, " << c.watches << " watches";
  }
}

TEST(Unwatched, FileSourceFallsBackToStatLogsAndCountsItAndRecovers) {
  TempDir dir;
  writeFile(dir.file("s"), "value-one\n");
  ChildRun run = inNamespaceWithLimits(0, 8192, [&] {
    std::ostringstream log;
    captureLog(log);
    std::ostringstream r;
    {
      FileSource src(dir.file("s"));
      Fetched f = src.get();
      r << "first=" << (f.ok() ? f.secret->reveal() : f.error);
      r << " unwatched=" << unwatchedFileSources();
      // Without events, every get() checks with stat(2): a rotation is still seen at once.
      testing::replaceFile(dir.file("s"), "value-two\n");
      f = src.get();
      r << " rotated=" << (f.ok() ? f.secret->reveal() : f.error);
      // Instances allowed again: the next attempt (after the one-second pause) watches.
      if (!writeText("/proc/sys/user/max_inotify_instances", "128")) return std::string("raise");
      std::this_thread::sleep_for(std::chrono::milliseconds(1100));
      f = src.get();
      r << " after=" << (f.ok() ? f.secret->reveal() : f.error);
      r << " unwatched=" << unwatchedFileSources();
      // Watched now: an in-place write (same size, same second) is an event.
      writeFile(dir.file("s"), "value-3rd\n");
      f = src.get();
      r << " written=" << (f.ok() ? f.secret->reveal() : f.error);
    }
    {
      // A source destroyed while degraded is no longer counted.
      if (!writeText("/proc/sys/user/max_inotify_instances", "0")) return std::string("lower");
      FileSource other(dir.file("s"));
      other.get();
      r << " other=" << unwatchedFileSources();
    }
    r << " gone=" << unwatchedFileSources();
    spdlog::default_logger()->flush();
    r << "\n" << log.str();
    return r.str();
  });
  if (!run.skip.empty()) GTEST_SKIP() << "inotify limits not lowered: " << run.skip;
  const std::string path = dir.file("s");
  EXPECT_THAT(run.report, HasSubstr("first=value-one unwatched=1 rotated=value-two "
                                    "after=value-two unwatched=0 written=value-3rd other=1 "
                                    "gone=0\n"));
  EXPECT_THAT(run.report,
              HasSubstr("warning credential file " + path +
                        ": changes cannot be watched (inotify_init1: Too many open files "
                        "(limits: sysctl fs.inotify.max_user_instances, and the process's open "
                        "files)); checking it with stat(2) on every request instead, and trying "
                        "to watch again every second\n"));
  EXPECT_THAT(run.report,
              HasSubstr("info credential file " + path + ": changes are watched again\n"));
  // Transitions only: two sources went unwatched, one came back.
  EXPECT_EQ(std::count(run.report.begin(), run.report.end(), '\n'), 4) << run.report;
}

}  // namespace
}  // namespace sandgate::broker
