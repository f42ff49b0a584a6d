// common/safe_open: no link is followed on the way to a file sandgate writes, by openat2 and by
// the component walk alike (every case runs with both).
#include "common/safe_open.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace sandgate::safe_open {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class SafeOpen : public ::testing::TestWithParam<Method> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/safe-open-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    // root_/real/sub, root_/victim (a file standing for /etc/cron.d/x), root_/victimdir;
    // links: root_/link -> real, root_/real/sub/file-link -> ../../victim.
    fs::create_directories(root_ / "real" / "sub");
    fs::create_directory(root_ / "victimdir");
    std::ofstream(root_ / "victim") << "untouched";
    fs::create_directory_symlink(root_ / "real", root_ / "link");
    fs::create_directory_symlink(root_ / "victimdir", root_ / "real" / "dirlink");
    fs::create_symlink("../../victim", root_ / "real" / "sub" / "file-link");
    fs::create_symlink(root_ / "nowhere", root_ / "real" / "dangling");
  }
  void TearDown() override { fs::remove_all(root_); }

  int open(const fs::path& p, int flags, mode_t mode = 0) {
    return openNoSymlinks(p.string(), flags, mode, GetParam());
  }

  fs::path root_;
};

constexpr int kWrite = O_WRONLY | O_CREAT | O_TRUNC;

TEST_P(SafeOpen, OpensAndCreatesAlongRealDirectories) {
  UniqueFd fd(open(root_ / "real" / "sub" / "new", kWrite, 0600));
  ASSERT_TRUE(fd.valid()) << std::strerror(errno);
  ASSERT_EQ(::write(fd.get(), "x", 1), 1);
  EXPECT_EQ(slurp(root_ / "real" / "sub" / "new"), "x");
  EXPECT_TRUE(::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC);
  // `..` is not a link: allowed.
  UniqueFd up(open(root_ / "real" / "sub" / ".." / "sub" / "new", O_RDONLY));
  EXPECT_TRUE(up.valid()) << std::strerror(errno);
}

TEST_P(SafeOpen, RefusesALinkInAnyComponent) {
  struct Case {
    const char* name;
    fs::path path;
  } cases[] = {
      {"directory link first", root_ / "link" / "sub" / "x"},
      {"directory link in the middle", root_ / "real" / "dirlink" / "x"},
      {"the last component", root_ / "real" / "sub" / "file-link"},
      {"a dangling last component", root_ / "real" / "dangling"},
  };
  for (const auto& c : cases) {
    errno = 0;
    int fd = open(c.path, kWrite, 0644);
    EXPECT_EQ(fd, -1) << c.name;
    EXPECT_EQ(errno, ELOOP) << c.name << ": " << std::strerror(errno);
    if (fd >= 0) ::close(fd);
  }
  EXPECT_EQ(slurp(root_ / "victim"), "untouched");
  EXPECT_TRUE(fs::is_empty(root_ / "victimdir"));
  EXPECT_FALSE(fs::exists(root_ / "nowhere"));
}

TEST_P(SafeOpen, OPathDoesNotOpenTheLinkItself) {
  errno = 0;
  EXPECT_EQ(open(root_ / "real" / "sub" / "file-link", O_PATH), -1);
  EXPECT_EQ(errno, ELOOP);
}

TEST_P(SafeOpen, BeneathStaysInsideItsDirectory) {
  UniqueFd anchor(open(root_ / "real", O_PATH | O_DIRECTORY));
  ASSERT_TRUE(anchor.valid());
  UniqueFd inside(openBeneath(anchor.get(), "sub/../sub/in", kWrite, 0600, GetParam()));
  EXPECT_TRUE(inside.valid()) << std::strerror(errno);
  struct Case {
    const char* name;
    std::string path;
    int err;
  } cases[] = {
      {"absolute", (root_ / "victim").string(), EXDEV},
      {"dot-dot above", "../victim", EXDEV},
      {"dot-dot above later", "sub/../../victim", EXDEV},
      {"a link inside", "dirlink/x", ELOOP},
  };
  for (const auto& c : cases) {
    errno = 0;
    int fd = openBeneath(anchor.get(), c.path, kWrite, 0600, GetParam());
    EXPECT_EQ(fd, -1) << c.name;
    EXPECT_EQ(errno, c.err) << c.name << ": " << std::strerror(errno);
    if (fd >= 0) ::close(fd);
  }
  EXPECT_EQ(slurp(root_ / "victim"), "untouched");
}

TEST_P(SafeOpen, ParentOfAPath) {
  auto p = openParent((root_ / "real" / "sub" / "f").string(), GetParam());
  ASSERT_TRUE(p) << std::strerror(errno);
  EXPECT_EQ(p->name, "f");
  struct stat a {
  }, b{};
  ASSERT_EQ(::fstat(p->dir.get(), &a), 0);
  ASSERT_EQ(::stat((root_ / "real" / "sub").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  errno = 0;
  EXPECT_FALSE(openParent((root_ / "link" / "f").string(), GetParam()));
  EXPECT_EQ(errno, ELOOP);
  for (const char* bad : {"/", "", "a/..", "."}) EXPECT_FALSE(openParent(bad)) << bad;
}

INSTANTIATE_TEST_SUITE_P(Methods, SafeOpen, ::testing::Values(Method::kAuto, Method::kWalk),
                         [](const auto& info) {
                           return info.param == Method::kAuto ? "openat2" : "walk";
                         });

class SafeOpenFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/safe-open-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ / "ws" / "sub");
    fs::create_directory(root_ / "victimdir");
    std::ofstream(root_ / "victim") << "untouched";
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(SafeOpenFiles, ReplaceFileWritesExactlyTheModeAndReplacesALinkInsteadOfFollowingIt) {
  fs::create_symlink(root_ / "victim", root_ / "ws" / "ca.pem");
  mode_t saved = ::umask(077);  // the file gets 0644 all the same
  EXPECT_EQ(replaceFile((root_ / "ws" / "ca.pem").string(), "PEM\n", 0644), std::nullopt);
  ::umask(saved);
  EXPECT_FALSE(fs::is_symlink(root_ / "ws" / "ca.pem"));
  EXPECT_EQ(slurp(root_ / "ws" / "ca.pem"), "PEM\n");
  EXPECT_EQ(fs::status(root_ / "ws" / "ca.pem").permissions(),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
  EXPECT_EQ(slurp(root_ / "victim"), "untouched");
  // Nothing but the file is left in the directory (no temporary).
  EXPECT_EQ(std::distance(fs::directory_iterator(root_ / "ws"), fs::directory_iterator()), 2);
}

TEST_F(SafeOpenFiles, ReplaceFileRefusesALinkOnTheWay) {
  fs::create_directory_symlink(root_ / "victimdir", root_ / "ws" / "out");
  auto err = replaceFile((root_ / "ws" / "out" / "ca.pem").string(), "PEM\n", 0644);
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("symbolic link"), std::string::npos) << *err;
  EXPECT_NE(err->find((root_ / "ws" / "out" / "ca.pem").string()), std::string::npos) << *err;
  EXPECT_TRUE(fs::is_empty(root_ / "victimdir"));
}

TEST_F(SafeOpenFiles, IsWithinComparesDirectoriesNotNames) {
  struct stat ws {};
  ASSERT_EQ(::stat((root_ / "ws").c_str(), &ws), 0);
  fs::create_directory_symlink(root_ / "ws" / "sub", root_ / "alias");
  struct Case {
    const char* name;
    fs::path dir;
    int within;
  } cases[] = {
      {"the directory itself", root_ / "ws", 1},
      {"below it", root_ / "ws" / "sub", 1},
      {"below it through a link", root_ / "alias", 1},
      {"below it through ..", root_ / "victimdir" / ".." / "ws" / "sub", 1},
      {"beside it", root_ / "victimdir", 0},
      {"above it", root_, 0},
      {"the root", "/", 0},
  };
  for (const auto& c : cases) {
    UniqueFd fd(::open(c.dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid()) << c.name;
    EXPECT_EQ(isWithin(fd.get(), ws.st_dev, ws.st_ino), c.within) << c.name;
  }
}

}  // namespace
}  // namespace sandgate::safe_open
