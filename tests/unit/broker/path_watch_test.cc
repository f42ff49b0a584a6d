// Tests for broker/path_watch.cc: which changes on the way to a secret file count, including a
// Kubernetes-style `..data` link swap, and which do not (other entries of the same directory).
#include "broker/path_watch.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

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

}  // namespace
}  // namespace sandgate::broker
