// Tests for broker/secret.cc: the Secret type cannot be printed or copied, its memory is
// protected and wiped, and control bytes are refused without quoting the secret.
#include "broker/secret.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>

namespace sandgate::broker {
namespace {

template <typename T>
concept OstreamInsertable = requires(std::ostream& os, const T& v) {
  os << v;
};

// Compile-time: the ways a secret could reach a log by accident do not compile.
static_assert(!OstreamInsertable<Secret>, "a Secret must not be printable with <<");
static_assert(!fmt::is_formattable<Secret>::value, "a Secret must not be fmt-formattable");
static_assert(!std::is_copy_constructible_v<Secret>);
static_assert(!std::is_copy_assignable_v<Secret>);
static_assert(!std::is_move_constructible_v<Secret>);
static_assert(!std::is_convertible_v<Secret, std::string>);
static_assert(!std::is_convertible_v<Secret, std::string_view>);
// The checks above are not vacuous: the same concept does see ordinary printable types.
static_assert(OstreamInsertable<std::string>);
static_assert(fmt::is_formattable<std::string>::value);

TEST(Secret, RevealsExactlyTheBytes) {
  auto s = Secret::copyOf("sk-test-123");
  EXPECT_EQ(s->reveal(), "sk-test-123");
  EXPECT_EQ(s->size(), 11u);
  EXPECT_TRUE(s->equals("sk-test-123"));
  EXPECT_FALSE(s->equals("sk-test-124"));
  EXPECT_FALSE(s->equals("sk-test-12"));
}

TEST(Secret, TakeWipesTheSource) {
  std::string raw = "a-long-secret-value-that-is-not-in-sso-storage-0123456789";
  auto s = Secret::take(raw);
  EXPECT_TRUE(raw.empty());
  EXPECT_EQ(s->reveal(), "a-long-secret-value-that-is-not-in-sso-storage-0123456789");
}

TEST(Secret, WipeZeroesTheWholeBuffer) {
  std::string s(100, 'x');
  s.resize(10);  // the 90 bytes past size() still hold 'x'
  const char* data = s.data();
  wipe(s);
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.data(), data);  // same buffer, now zeroed up to its capacity
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(data[i], '\0') << i;
}

TEST(Secret, LargeAndManySecretsWork) {
  // More than RLIMIT_MEMLOCK may allow: mlock can fail, the secret must still work.
  std::string big(1 << 20, 'k');
  std::vector<std::shared_ptr<const Secret>> many;
  for (int i = 0; i < 20; ++i) many.push_back(Secret::copyOf(big));
  for (const auto& s : many) ASSERT_TRUE(s->equals(big));
  auto tiny = Secret::copyOf("x");
  EXPECT_EQ(tiny->reveal(), "x");
  many.clear();  // wipe + munlock + munmap paths
}

// The VmFlags of the mapping holding `addr`, from /proc/self/smaps ("" if none holds it).
std::string vmFlagsAt(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(addr);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(' ') != line.npos &&
        line.find(':') > line.find(' ')) {
      inside = lo <= a && a < hi;  // a mapping's first line: "lo-hi perms offset ..."
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool hasFlag(const std::string& vmFlags, const std::string& flag) {
  return (vmFlags + " ").find(" " + flag + " ") != std::string::npos;
}

TEST(Secret, MemoryIsLockedAndKeptOutOfDumpsAndForks) {
  auto s = Secret::copyOf("keep-me-in-ram");
  const void* at = s->reveal().data();
  const std::string flags = vmFlagsAt(at);
  ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the secret";
  EXPECT_TRUE(hasFlag(flags, "dd")) << flags;  // MADV_DONTDUMP: not in core dumps
#ifdef MADV_WIPEONFORK
  EXPECT_TRUE(hasFlag(flags, "wf")) << flags;  // MADV_WIPEONFORK: zeros in a child
#endif
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "mlock() not checked: AddressSanitizer replaces mlock() with a no-op (the "
                  "flags above were checked)";
#endif
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  const bool mayLock = geteuid() == 0 || lim.rlim_cur == RLIM_INFINITY ||
                       lim.rlim_cur >= 64 * static_cast<rlim_t>(sysconf(_SC_PAGESIZE));
  if (!mayLock) {
    GTEST_SKIP() << "mlock() not checked: RLIMIT_MEMLOCK is " << lim.rlim_cur
                 << " bytes and not root (the flags above were checked)";
  }
  EXPECT_TRUE(s->locked());
  EXPECT_TRUE(hasFlag(flags, "lo")) << flags;  // mlock(): never swapped out
}

TEST(Secret, NotInheritedByFork) {
  auto s = Secret::copyOf("inherit-me-not");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // MADV_WIPEONFORK: the child's copy of the pages reads as zeros.
    std::string_view v = s->reveal();
    bool allZero = true;
    for (char c : v) allZero = allZero && c == '\0';
    _exit(allZero ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "secret bytes visible in a forked child";
  EXPECT_EQ(s->reveal(), "inherit-me-not");  // the parent keeps them
}

TEST(Secret, DisableCoreDumps) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (disableCoreDumps()) _exit(2);
    _exit(prctl(PR_GET_DUMPABLE) == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

struct BytesCase {
  const char* name;
  std::string input;
  bool ok;
  const char* errorPart;  // substring of the error
};

TEST(CheckSecretBytes, Table) {
  using namespace std::string_literals;
  const BytesCase cases[] = {
      {"plain", "sk-abc123", true, ""},
      {"spaces_inside", "pass word", true, ""},
      {"symbols", "a!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", true, ""},
      {"utf8", "p\xc3\xa4ss", true, ""},
      {"empty", "", false, "empty"},
      {"lf", "hunter2\nInjected: 1", false, "line feed (LF) at offset 7"},
      {"cr", "hunter2\rx", false, "carriage return (CR) at offset 7"},
      {"nul", "hunter2\0x"s, false, "NUL byte at offset 7"},
      {"tab", "hunter2\tx", false, "control byte 0x09"},
      {"soh", "\x01hunter2", false, "control byte 0x01 at offset 0"},
      {"del", "hunter2\x7f", false, "control byte 0x7f"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto err = checkSecretBytes(c.input);
    EXPECT_EQ(!err.has_value(), c.ok);
    if (err) {
      EXPECT_NE(err->find(c.errorPart), std::string::npos) << *err;
      EXPECT_EQ(err->find("hunter2"), std::string::npos) << "error quotes the secret: " << *err;
    }
  }
}

TEST(TrimTrailingNewline, Table) {
  const std::pair<std::string, std::string> cases[] = {
      {"abc\n", "abc"}, {"abc\r\n", "abc"}, {"abc\n\n", "abc\n"}, {"abc", "abc"},
      {"\n", ""},       {"abc\r", "abc\r"}, {"a\nb\n", "a\nb"},
  };
  for (const auto& [in, want] : cases) {
    std::string s = in;
    trimTrailingNewline(s);
    EXPECT_EQ(s, want) << "input size " << in.size();
  }
}

}  // namespace
}  // namespace sandgate::broker
