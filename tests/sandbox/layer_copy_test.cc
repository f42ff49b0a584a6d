// Unit tests of sandbox/layer_copy: a copy keeps holes and hard links, drops setuid and setgid,
// gives every entry to the run's uid, and stops at its byte bound naming what it left out.
#include "sandbox/layer_copy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/sandbox/sandbox_fixture.h"

namespace sandgate::sandbox {
namespace {

void writeFile(const std::string& path, size_t bytes, mode_t mode = 0644) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  ASSERT_GE(fd, 0) << path;
  std::string chunk(65536, 'a');
  for (size_t done = 0; done < bytes; done += chunk.size()) {
    ASSERT_GT(::write(fd, chunk.data(), std::min(chunk.size(), bytes - done)), 0);
  }
  ASSERT_EQ(::fchmod(fd, mode), 0);
  ::close(fd);
}

struct stat lstatOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

class LayerCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    from_ = dir_.path() + "/from";
    to_ = dir_.path() + "/to";
    std::filesystem::create_directories(from_ + "/sub");
    std::filesystem::create_directories(to_);
  }
  std::string copy(const LayerCopyOptions& options, LayerCopyOutcome* out) {
    int from = ::open(from_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int to = ::open(to_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    std::string e = copyUpperLayer(from, to, options, out);
    ::close(from);
    ::close(to);
    return e;
  }
  testing::TempDir dir_;
  std::string from_, to_;
};

TEST_F(LayerCopyTest, HolesLinksSetuidAndOwner) {
  int fd = ::open((from_ + "/sparse").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t{1} << 30), 0);
  ASSERT_EQ(::pwrite(fd, "end", 3, (off_t{1} << 30) - 3), 3);
  ::close(fd);
  writeFile(from_ + "/big", 1 << 20);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(::link((from_ + "/big").c_str(), (from_ + "/sub/l" + std::to_string(i)).c_str()), 0);
  }
  writeFile(from_ + "/suid", 10, 04755);
  ASSERT_EQ(::mkfifo((from_ + "/fifo").c_str(), 0640), 0);
  ASSERT_EQ(::symlink("/etc/shadow", (from_ + "/lnk").c_str()), 0);
  LayerCopyOutcome out;
  ASSERT_EQ(copy(LayerCopyOptions{54321, 54322, 0}, &out), "");
  auto sparse = lstatOf(to_ + "/sparse");
  EXPECT_EQ(sparse.st_size, off_t{1} << 30);
  EXPECT_LT(sparse.st_blocks * 512, 1 << 20);  // the hole is a hole
  auto big = lstatOf(to_ + "/big");
  EXPECT_EQ(big.st_nlink, 6u);
  EXPECT_EQ(lstatOf(to_ + "/sub/l4").st_ino, big.st_ino);
  EXPECT_EQ(out.links, 5u);
  EXPECT_EQ(lstatOf(to_ + "/suid").st_mode & 07777, 0755u);
  EXPECT_TRUE(S_ISFIFO(lstatOf(to_ + "/fifo").st_mode));
  EXPECT_EQ(std::filesystem::read_symlink(to_ + "/lnk"), "/etc/shadow");
  for (const char* p : {"/sparse", "/big", "/sub", "/suid", "/fifo", "/lnk"}) {
    auto st = lstatOf(to_ + p);
    EXPECT_EQ(st.st_uid, 54321u) << p;
    EXPECT_EQ(st.st_gid, 54322u) << p;
  }
}

TEST_F(LayerCopyTest, StopsAtTheBoundAndNamesWhatItLeftOut) {
  for (int i = 0; i < 4; ++i) writeFile(from_ + "/f" + std::to_string(i), 1 << 20);
  writeFile(from_ + "/sub/small", 100);
  LayerCopyOutcome out;
  ASSERT_EQ(
      copy(LayerCopyOptions{static_cast<uid_t>(-1), static_cast<gid_t>(-1), (5u << 20) / 2}, &out),
      "");
  EXPECT_LE(out.bytes, (5u << 20) / 2);
  EXPECT_EQ(out.notCopiedCount, 2u);
  EXPECT_EQ(out.notCopied, (std::vector<std::string>{"f2", "f3"}));
  EXPECT_FALSE(std::filesystem::exists(to_ + "/f3"));
  EXPECT_TRUE(std::filesystem::exists(to_ + "/sub/small"));  // what fits is still copied
}

}  // namespace
}  // namespace sandgate::sandbox
