// common/fd_passing.h over a real socketpair: descriptors arrive open and close-on-exec, the
// limit is enforced before anything is sent, end of file is 0.
#include "common/fd_passing.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

namespace sandgate::fd_passing {
namespace {

class FdPassing : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv_), 0); }
  void TearDown() override {
    for (int fd : sv_) {
      if (fd >= 0) ::close(fd);
    }
  }
  int sv_[2] = {-1, -1};
};

TEST_F(FdPassing, DescriptorsArriveWithTheMessage) {
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  std::string text = "adopt";
  iovec out{text.data(), text.size()};
  const int send[2] = {pipefd[0], pipefd[1]};
  ASSERT_EQ(sendWithFds(sv_[0], std::span<iovec>(&out, 1), send),
            static_cast<ssize_t>(text.size()));
  ::close(pipefd[0]);
  ::close(pipefd[1]);

  char buf[16];
  iovec in{buf, sizeof buf};
  std::vector<int> fds;
  int flags = -1;
  ASSERT_EQ(receiveWithFds(sv_[1], std::span<iovec>(&in, 1), &fds, 0, &flags), 5);
  EXPECT_EQ(std::string(buf, 5), "adopt");
  EXPECT_EQ(flags & (MSG_TRUNC | MSG_CTRUNC), 0);
  ASSERT_EQ(fds.size(), 2u);
  for (int fd : fds) EXPECT_TRUE(::fcntl(fd, F_GETFD) & FD_CLOEXEC);
  // They are the pipe's two ends: what goes in one comes out of the other.
  ASSERT_EQ(::write(fds[1], "x", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  for (int fd : fds) ::close(fd);
}

TEST_F(FdPassing, TooManyDescriptorsAreRefusedBeforeSending) {
  std::vector<int> many(kMaxFds + 1, sv_[0]);
  char byte = 0;
  iovec out{&byte, 1};
  errno = 0;
  EXPECT_EQ(sendWithFds(sv_[0], std::span<iovec>(&out, 1), many), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(FdPassing, EndOfFileIsZeroWithNoDescriptors) {
  ::close(sv_[0]);
  sv_[0] = -1;
  char buf[4];
  iovec in{buf, sizeof buf};
  std::vector<int> fds;
  EXPECT_EQ(receiveWithFds(sv_[1], std::span<iovec>(&in, 1), &fds), 0);
  EXPECT_TRUE(fds.empty());
}

}  // namespace
}  // namespace sandgate::fd_passing
