// Tests for broker/path_watch.cc: which changes on the way to a secret file count, including a
// Kubernetes-style `..data` link swap, and which do not (other entries of the same directory);
// the one inotify instance that every PathWatch of the process shares.
#include "broker/path_watch.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/broker/test_util.h"

namespace sandgate::broker {
namespace {

namespace fs = std::filesystem;
using State = PathWatch::State;
using testing::TempDir;
using testing::writeFile;

TEST(PathWatch, WritingTheFileIsAChangeAndArmingStartsAfresh) {
  TempDir dir;
  writeFile(dir.file("s"), "one\n");
  PathWatch w(dir.file("s"));
  ASSERT_EQ(w.arm(), State::kQuiet);
  EXPECT_EQ(w.poll(), State::kQuiet);
  writeFile(dir.file("s"), "two\n");
  EXPECT_EQ(w.poll(), State::kChanged);
  ASSERT_EQ(w.arm(), State::kQuiet);
  EXPECT_EQ(w.poll(), State::kQuiet) << "arm() discards what came before it";
}

TEST(PathWatch, ReplacingRemovingAndChmoddingTheFileAreChanges) {
  TempDir dir;
  writeFile(dir.file("s"), "one\n");
  PathWatch w(dir.file("s"));
  ASSERT_EQ(w.arm(), State::kQuiet);
  testing::replaceFile(dir.file("s"), "two\n");
  EXPECT_EQ(w.poll(), State::kChanged);

  ASSERT_EQ(w.arm(), State::kQuiet);
  fs::permissions(dir.file("s"), fs::perms::owner_read);
  EXPECT_EQ(w.poll(), State::kChanged);

  ASSERT_EQ(w.arm(), State::kQuiet);
  fs::remove(dir.file("s"));
  EXPECT_EQ(w.poll(), State::kChanged);
}

TEST(PathWatch, OtherEntriesOfTheDirectoryAreIgnored) {
  TempDir dir;
  writeFile(dir.file("s"), "one\n");
  PathWatch w(dir.file("s"));
  ASSERT_EQ(w.arm(), State::kQuiet);
  writeFile(dir.file("other"), "x\n");
  fs::rename(dir.file("other"), dir.file("other2"));
  fs::create_directory(dir.file("sub"));
  fs::remove(dir.file("other2"));
  EXPECT_EQ(w.poll(), State::kQuiet);
}

TEST(PathWatch, DotDotOnTheWayIsFollowedAsALookupDoes) {
  TempDir dir;
  fs::create_directory(dir.file("sub"));
  writeFile(dir.file("s"), "one\n");
  PathWatch w(dir.file("sub/../s"));
  ASSERT_EQ(w.arm(), State::kQuiet);
  writeFile(dir.file("sub/s"), "not the one\n");
  EXPECT_EQ(w.poll(), State::kQuiet);
  testing::replaceFile(dir.file("s"), "two\n");
  EXPECT_EQ(w.poll(), State::kChanged);
}

TEST(PathWatch, AMissingFileIsSeenWhenItAppears) {
  TempDir dir;
  PathWatch w(dir.file("s"));
  ASSERT_EQ(w.arm(), State::kQuiet);
  EXPECT_EQ(w.poll(), State::kQuiet);
  writeFile(dir.file("s"), "late\n");
  EXPECT_EQ(w.poll(), State::kChanged);
}

TEST(PathWatch, AKubernetesDataLinkSwapIsAChange) {
  TempDir dir;
  testing::makeSecretVolume(dir.path(), "token", "2026_a", "first\n");
  PathWatch w(dir.file("token"));
  ASSERT_EQ(w.arm(), State::kQuiet);

  fs::create_directory(dir.file("..2026_b"));
  writeFile(dir.file("..2026_b/token"), "second\n");
  EXPECT_EQ(w.poll(), State::kQuiet) << "nothing the path leads through has changed yet";
  fs::create_directory_symlink("..2026_b", dir.file("..data_tmp"));
  fs::rename(dir.file("..data_tmp"), dir.file("..data"));
  EXPECT_EQ(w.poll(), State::kChanged);

  // Armed again, the watch follows the new target and has let go of the old one.
  ASSERT_EQ(w.arm(), State::kQuiet);
  writeFile(dir.file("..2026_a/token"), "stale\n");
  fs::remove_all(dir.file("..2026_a"));
  EXPECT_EQ(w.poll(), State::kQuiet);
  writeFile(dir.file("..2026_b/token"), "third\n");
  EXPECT_EQ(w.poll(), State::kChanged);
}

TEST(PathWatch, ALinkedDirectoryOnTheWayIsWatchedWhereTheLinkLives) {
  TempDir dir;
  fs::create_directory(dir.file("real1"));
  fs::create_directory(dir.file("real2"));
  writeFile(dir.file("real1/s"), "one\n");
  writeFile(dir.file("real2/s"), "two\n");
  fs::create_directory_symlink(dir.file("real1"), dir.file("link"));
  PathWatch w(dir.file("link/./s"));
  ASSERT_EQ(w.arm(), State::kQuiet);
  fs::remove(dir.file("link"));
  fs::create_directory_symlink(dir.file("real2"), dir.file("link"));
  EXPECT_EQ(w.poll(), State::kChanged);

  ASSERT_EQ(w.arm(), State::kQuiet);
  fs::permissions(dir.file("real2"), fs::perms::owner_all);
  EXPECT_EQ(w.poll(), State::kChanged) << "a directory on the way re-permissioned";
}

// The inotify instances this process holds (descriptors that link to "anon_inode:inotify").
int inotifyInstances() {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec).string() == "anon_inode:inotify") ++n;
  }
  return n;
}

TEST(PathWatch, OneInstanceServesTheWholeProcessWhileAnyWatchIsArmed) {
  TempDir a, b;
  for (const char* name : {"s1", "s2"}) {
    writeFile(a.file(name), "x\n");
    writeFile(b.file(name), "x\n");
  }
  ASSERT_EQ(inotifyInstances(), 0);
  {
    PathWatch w1(a.file("s1")), w2(a.file("s2")), w3(b.file("s1")), w4(b.file("s2"));
    for (PathWatch* w : {&w1, &w2, &w3, &w4}) ASSERT_EQ(w->arm(), State::kQuiet);
    EXPECT_EQ(inotifyInstances(), 1);
    // Each still hears only about its own path.
    writeFile(b.file("s1"), "y\n");
    EXPECT_EQ(w1.poll(), State::kQuiet);
    EXPECT_EQ(w2.poll(), State::kQuiet);
    EXPECT_EQ(w3.poll(), State::kChanged);
    EXPECT_EQ(w4.poll(), State::kQuiet);
  }
  EXPECT_EQ(inotifyInstances(), 0) << "the instance is closed with the last watch";
}

TEST(PathWatch, AWatchOnASharedDirectoryOutlivesTheOtherPathWatch) {
  // b does not exist: only the directory's watch can see it appear.
  TempDir dir;
  writeFile(dir.file("a"), "x\n");
  PathWatch wb(dir.file("b"));
  ASSERT_EQ(wb.arm(), State::kQuiet);
  {
    PathWatch wa(dir.file("a"));
    ASSERT_EQ(wa.arm(), State::kQuiet);
    testing::replaceFile(dir.file("a"), "y\n");
    EXPECT_EQ(wa.poll(), State::kChanged);
    EXPECT_EQ(wb.poll(), State::kQuiet) << "the other entry is not b's concern";
    ASSERT_EQ(wa.arm(), State::kQuiet);  // placed again on the directory both watch
    EXPECT_EQ(wb.poll(), State::kQuiet) << "a's re-arm is not b's concern";
    writeFile(dir.file("b"), "x\n");
    EXPECT_EQ(wb.poll(), State::kChanged) << "a's re-arm kept the directory's watch";
    EXPECT_EQ(wa.poll(), State::kQuiet);
    fs::remove(dir.file("b"));
    ASSERT_EQ(wb.arm(), State::kQuiet);
  }
  EXPECT_EQ(wb.poll(), State::kQuiet) << "a's end is not b's concern";
  writeFile(dir.file("b"), "x\n");
  EXPECT_EQ(wb.poll(), State::kChanged) << "a's end kept the directory's watch";
}

TEST(PathWatch, EventsReadByAnotherThreadReachTheirWatch) {
  // Four threads, each with its own watch on its own file in one directory; whichever thread
  // reads the shared instance hands each event to the watch it concerns.
  TempDir dir;
  constexpr int kThreads = 4, kRounds = 200;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string path = dir.file("s" + std::to_string(t));
      writeFile(path, "0\n");
      PathWatch w(path);
      if (w.arm() != State::kQuiet) ++wrong;
      for (int i = 0; i < kRounds; ++i) {
        writeFile(path, std::to_string(i) + "\n");
        if (w.poll() != State::kChanged) ++wrong;
        if (w.arm() != State::kQuiet) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(inotifyInstances(), 0);
}

}  // namespace
}  // namespace sandgate::broker
