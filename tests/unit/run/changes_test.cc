// run/changes: the change list read from an upper layer made by hand the way overlayfs makes
// it (whiteouts, opaque directories, copied-up files), without mounting an overlay.
#include "run/changes.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

namespace sandgate::run {
namespace {

namespace fs = std::filesystem;

class ChangesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandgate-changes-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    lower_ = root_ + "/lower";
    upper_ = root_ + "/upper";
    fs::create_directories(lower_);
    fs::create_directories(upper_);
  }
  void TearDown() override { fs::remove_all(root_); }

  static void write(const std::string& path, const std::string& data, mode_t mode = 0644) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << data;
    ::chmod(path.c_str(), mode);
  }
  // overlayfs's whiteout: a 0/0 character device (needs CAP_MKNOD; the tests run as root).
  bool whiteout(const std::string& path) {
    return ::mknod(path.c_str(), S_IFCHR | 0000, makedev(0, 0)) == 0;
  }

  std::map<std::string, Change> collect(bool fullCopy = false) {
    int lower = ::open(lower_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    int upper = ::open(upper_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    auto set = collectChanges(lower, upper, lower_, fullCopy);
    ::close(lower);
    ::close(upper);
    EXPECT_TRUE(set) << (set ? "" : set.errors().front().message);
    std::map<std::string, Change> out;
    if (set) {
      for (auto& c : set.value().changes) out.emplace(c.path, c);
    }
    return out;
  }

  std::string root_, lower_, upper_;
};

TEST_F(ChangesTest, WhiteoutsOpaqueDirectoriesAndCopiesUp) {
  if (geteuid() != 0) GTEST_SKIP() << "making a whiteout (mknod 0/0) needs root";
  write(lower_ + "/same.txt", "same\n");
  write(lower_ + "/edit.txt", "old\n");
  write(lower_ + "/mode.sh", "#!/bin/sh\n");
  write(lower_ + "/gone.txt", "bye\n");
  write(lower_ + "/dir/a", "a\n");
  write(lower_ + "/dir/b", "b\n");
  write(lower_ + "/tree/x", "x\n");
  // Copied up but equal (touched): no change. Edited, chmod-ed, a new file, a whiteout.
  write(upper_ + "/same.txt", "same\n");
  write(upper_ + "/edit.txt", "new\n");
  write(upper_ + "/mode.sh", "#!/bin/sh\n", 0755);
  write(upper_ + "/new.txt", "hi\n");
  ASSERT_TRUE(whiteout(upper_ + "/gone.txt"));
  // `rm -rf dir; mkdir dir; echo c > dir/c`: an opaque directory hides a and b.
  write(upper_ + "/dir/c", "c\n");
  ASSERT_EQ(::setxattr((upper_ + "/dir").c_str(), "user.overlay.opaque", "y", 1, 0), 0);
  // A lower directory replaced by a file: its content deleted, its type changed.
  write(upper_ + "/tree", "now a file\n");
  // A whiteout for a name the lower layer never had is no change.
  ASSERT_TRUE(whiteout(upper_ + "/never"));
  auto ch = collect();
  EXPECT_EQ(ch.count("same.txt"), 0u);
  EXPECT_EQ(ch.count("never"), 0u);
  ASSERT_EQ(ch.count("edit.txt"), 1u);
  EXPECT_EQ(ch["edit.txt"].kind, Change::Kind::kModified);
  EXPECT_NE(ch["edit.txt"].before->sha256, ch["edit.txt"].after->sha256);
  EXPECT_EQ(ch["edit.txt"].after->size, 4u);
  ASSERT_EQ(ch.count("mode.sh"), 1u);
  EXPECT_EQ(ch["mode.sh"].kind, Change::Kind::kMode);
  EXPECT_EQ(ch["mode.sh"].before->mode, 0644u);
  EXPECT_EQ(ch["mode.sh"].after->mode, 0755u);
  EXPECT_EQ(ch["new.txt"].kind, Change::Kind::kAdded);
  EXPECT_EQ(ch["gone.txt"].kind, Change::Kind::kDeleted);
  EXPECT_EQ(ch["gone.txt"].before->sha256,
            "abc6fd595fc079d3114d4b71a4d84b1d1d0f79df1e70f8813212f2a65d8916df");  // "bye\n"
  EXPECT_EQ(ch["dir/a"].kind, Change::Kind::kDeleted);
  EXPECT_EQ(ch["dir/b"].kind, Change::Kind::kDeleted);
  EXPECT_EQ(ch["dir/c"].kind, Change::Kind::kAdded);
  EXPECT_EQ(ch.count("dir"), 0u);  // the directory itself stays (same mode)
  EXPECT_EQ(ch["tree/x"].kind, Change::Kind::kDeleted);
  ASSERT_EQ(ch.count("tree"), 1u);
  EXPECT_EQ(ch["tree"].kind, Change::Kind::kModified);
  EXPECT_EQ(ch["tree"].before->type, "dir");
  EXPECT_EQ(ch["tree"].after->type, "file");
}

TEST_F(ChangesTest, AFullCopyLacksWhatWasDeleted) {
  // The overlay's copy fallback: the upper directory is the whole workspace, as the run left it.
  for (const auto& top : {lower_, upper_}) {
    write(top + "/same.txt", "same\n");
    write(top + "/dir/kept", "k\n");
  }
  write(lower_ + "/gone.txt", "bye\n");
  write(lower_ + "/dir/gone", "g\n");
  write(lower_ + "/old/x", "x\n");
  write(lower_ + "/edit.txt", "old\n");
  write(upper_ + "/edit.txt", "new\n");
  write(upper_ + "/dir/new", "n\n");
  auto ch = collect(true);
  EXPECT_EQ(ch.count("same.txt"), 0u);
  EXPECT_EQ(ch.count("dir/kept"), 0u);
  EXPECT_EQ(ch["gone.txt"].kind, Change::Kind::kDeleted);
  EXPECT_EQ(ch["dir/gone"].kind, Change::Kind::kDeleted);  // below the top too
  EXPECT_EQ(ch["old/x"].kind, Change::Kind::kDeleted);
  EXPECT_EQ(ch["old"].kind, Change::Kind::kDeleted);
  EXPECT_EQ(ch["edit.txt"].kind, Change::Kind::kModified);
  EXPECT_EQ(ch["dir/new"].kind, Change::Kind::kAdded);
  EXPECT_EQ(ch.size(), 6u);
  // Read as an overlay's upper layer, the same tree deletes nothing.
  auto asLayer = collect(false);
  EXPECT_EQ(asLayer.count("gone.txt"), 0u);
  EXPECT_EQ(asLayer.count("dir/gone"), 0u);
}

TEST_F(ChangesTest, LinksAreDescribedNeverFollowed) {
  write(root_ + "/outside/secret", "host secret\n");
  write(lower_ + "/d/f", "f\n");
  // The workload replaced d by a link out of the workspace: d/f is not read through it.
  fs::create_symlink(root_ + "/outside", upper_ + "/d");
  fs::create_symlink(root_ + "/outside/secret", upper_ + "/peek");
  auto ch = collect();
  ASSERT_EQ(ch.count("d"), 1u);
  EXPECT_EQ(ch["d"].after->type, "symlink");
  EXPECT_EQ(ch["d"].after->target, root_ + "/outside");
  EXPECT_EQ(ch["d/f"].kind, Change::Kind::kDeleted);
  EXPECT_EQ(ch["peek"].after->type, "symlink");
  EXPECT_EQ(ch["peek"].after->size, (root_ + "/outside/secret").size());  // the link's text
  EXPECT_EQ(ch.count("d/secret"), 0u);
}

TEST_F(ChangesTest, GitInternalsAreApartAndHooksFlagged) {
  fs::create_directories(lower_ + "/.git/hooks");
  write(upper_ + "/.git/hooks/pre-commit", "#!/bin/sh\n", 0755);
  write(upper_ + "/.git/objects/ab/cdef", "blob");
  write(upper_ + "/src/main.c", "int main;\n");
  auto ch = collect();
  EXPECT_TRUE(ch[".git/hooks/pre-commit"].git);
  EXPECT_TRUE(ch[".git/hooks/pre-commit"].flagged);
  EXPECT_TRUE(ch[".git/objects/ab/cdef"].git);
  EXPECT_FALSE(ch[".git/objects/ab/cdef"].flagged);
  EXPECT_FALSE(ch["src/main.c"].git);
  ChangeSet set;
  for (auto& [p, c] : ch) set.changes.push_back(c);
  auto summary = changeSummary(set).as_object();
  EXPECT_EQ(summary["flagged"].as_array().size(), 1u);
  EXPECT_EQ(summary["git"].as_uint64(), 4u);  // .git/objects and .git/objects/ab too
  // JSON round trip (what apply reads).
  auto back = changesFromJson(boost::json::serialize(changesToJson(set)));
  ASSERT_TRUE(back);
  ASSERT_EQ(back.value().changes.size(), set.changes.size());
  EXPECT_EQ(back.value().changes[0].path, set.changes[0].path);
}

}  // namespace
}  // namespace sandgate::run
