// Tests for broker/source.cc: file (rotation), env and exec sources, and their error messages,
// which must never quote a secret or a command's output.
#include "broker/source.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

#include "tests/unit/broker/test_util.h"

namespace sandgate::broker {
namespace {

using testing::TempDir;
using testing::writeFile;

TEST(FileSource, ReadsAndTrimsOneNewline) {
  TempDir dir;
  writeFile(dir.file("s"), "sk-file-secret\n");
  FileSource src(dir.file("s"));
  Fetched f = src.get();
  ASSERT_TRUE(f.ok()) << f.error;
  EXPECT_EQ(f.secret->reveal(), "sk-file-secret");
}

TEST(FileSource, RotationInPlaceIsSeenByTheNextGet) {
  TempDir dir;
  writeFile(dir.file("s"), "first-value\n");
  FileSource src(dir.file("s"));
  auto first = src.get().secret;
  ASSERT_TRUE(first);
  EXPECT_EQ(first->reveal(), "first-value");
  EXPECT_EQ(src.get().secret, first) << "unchanged file: the cached secret is returned";
  writeFile(dir.file("s"), "second-value-longer\n");  // same inode, different size
  auto second = src.get().secret;
  ASSERT_TRUE(second);
  EXPECT_EQ(second->reveal(), "second-value-longer");
  EXPECT_EQ(first->reveal(), "first-value") << "a request holding the old secret keeps it";
}

TEST(FileSource, RotationByRenameIsSeenByTheNextGet) {
  TempDir dir;
  writeFile(dir.file("s"), "value-A\n");
  FileSource src(dir.file("s"));
  ASSERT_EQ(src.get().secret->reveal(), "value-A");
  testing::replaceFile(dir.file("s"), "value-B\n");  // same size, new inode
  Fetched f = src.get();
  ASSERT_TRUE(f.ok()) << f.error;
  EXPECT_EQ(f.secret->reveal(), "value-B");
}

TEST(FileSource, AKubernetesDataLinkSwapIsSeenByTheNextGet) {
  TempDir dir;
  testing::makeSecretVolume(dir.path(), "openai", "2026_a", "sk-value-one\n");
  FileSource src(dir.file("openai"));
  auto first = src.get().secret;
  ASSERT_TRUE(first);
  EXPECT_EQ(first->reveal(), "sk-value-one");

  // Other files of the volume come and go: the cached secret stays.
  writeFile(dir.file("unrelated"), "x\n");
  std::filesystem::remove(dir.file("unrelated"));
  EXPECT_EQ(src.get().secret, first);

  testing::rotateSecretVolume(dir.path(), "openai", "2026_b", "sk-value-two\n");
  Fetched f = src.get();
  ASSERT_TRUE(f.ok()) << f.error;
  EXPECT_EQ(f.secret->reveal(), "sk-value-two");
}

TEST(FileSource, RemovedFileFailsClosedAndRecovers) {
  TempDir dir;
  writeFile(dir.file("s"), "value-A\n");
  FileSource src(dir.file("s"));
  ASSERT_TRUE(src.get().ok());
  std::filesystem::remove(dir.file("s"));
  Fetched gone = src.get();
  EXPECT_FALSE(gone.ok());
  EXPECT_NE(gone.error.find("No such file"), std::string::npos) << gone.error;
  writeFile(dir.file("s"), "value-C\n");
  Fetched back = src.get();
  ASSERT_TRUE(back.ok()) << back.error;
  EXPECT_EQ(back.secret->reveal(), "value-C");
}

struct FileCase {
  const char* name;
  std::string content;
  const char* errorPart;
};

TEST(FileSource, RefusedContentsTable) {
  using namespace std::string_literals;
  const FileCase cases[] = {
      {"empty", "", "empty"},
      {"only_newline", "\n", "empty"},
      {"two_lines", "hunter2\nsecond\n", "line feed (LF) at offset 7"},
      {"crlf_inside", "hunter2\r\nx", "carriage return (CR)"},
      {"nul", "hunter2\0x"s, "NUL byte"},
      {"escape", "hunter2\x1b[0m", "control byte 0x1b"},
      {"too_large", std::string(kMaxSecretBytes + 1, 'a'), "larger than"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    writeFile(dir.file("s"), c.content);
    FileSource src(dir.file("s"));
    Fetched f = src.get();
    EXPECT_FALSE(f.ok());
    EXPECT_NE(f.error.find(c.errorPart), std::string::npos) << f.error;
    EXPECT_EQ(f.error.find("hunter2"), std::string::npos) << f.error;
  }
}

TEST(FileSource, NotARegularFile) {
  TempDir dir;
  ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_NE(FileSource(dir.file("fifo")).get().error.find("not a regular file"), std::string::npos);
  EXPECT_NE(FileSource(dir.path()).get().error.find("not a regular file"), std::string::npos);
}

TEST(EnvSource, Table) {
  setenv("SANDGATE_TEST_SECRET_OK", "env-secret\n", 1);
  setenv("SANDGATE_TEST_SECRET_BAD", "env\nsecret", 1);
  unsetenv("SANDGATE_TEST_SECRET_UNSET");
  Fetched ok = readEnv("SANDGATE_TEST_SECRET_OK");
  ASSERT_TRUE(ok.ok()) << ok.error;
  EXPECT_EQ(ok.secret->reveal(), "env-secret");
  Fetched bad = readEnv("SANDGATE_TEST_SECRET_BAD");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.error.find("line feed"), std::string::npos);
  Fetched unset = readEnv("SANDGATE_TEST_SECRET_UNSET");
  EXPECT_FALSE(unset.ok());
  EXPECT_NE(unset.error.find("SANDGATE_TEST_SECRET_UNSET is not set"), std::string::npos);
}

struct ExecCase {
  const char* name;
  std::vector<std::string> argv;
  bool ok;
  const char* want;         // the secret, or a substring of the error
  const char* mustNotShow;  // never in the error (command output)
  ExecLimits limits;
};

TEST(ExecSource, Table) {
  ExecLimits fast;
  fast.timeout = std::chrono::milliseconds(300);
  ExecLimits small;
  small.maxOutput = 100;
  const ExecCase cases[] = {
      {"success_trimmed", {"/bin/sh", "-c", "echo exec-secret"}, true, "exec-secret", "", {}},
      {"path_lookup", {"printf", "from-path"}, true, "from-path", "", {}},
      {"stderr_ignored_on_success",
       {"/bin/sh", "-c", "echo tok; echo warning >&2"},
       true,
       "tok",
       "",
       {}},
      {"failure_shows_stderr",
       {"/bin/sh", "-c", "echo 'token service down' >&2; exit 3"},
       false,
       "exited with status 3: token service down",
       "",
       {}},
      {"failure_with_output_withholds_stderr",
       {"/bin/sh", "-c", "echo s3cret-partial; echo 'got s3cret-partial' >&2; exit 1"},
       false,
       "stderr withheld",
       "s3cret-partial",
       {}},
      {"signal", {"/bin/sh", "-c", "kill -9 $$"}, false, "killed by signal 9", "", {}},
      {"not_found", {"/nonexistent/get-token"}, false, "cannot run /nonexistent/get-token", "", {}},
      {"timeout", {"/bin/sleep", "5"}, false, "did not finish within 300 ms", "", fast},
      {"timeout_with_grandchild_holding_pipe",
       {"/bin/sh", "-c", "sleep 5 & echo early; wait"},
       false,
       "did not finish",
       "early",
       fast},
      {"too_much_output",
       {"/bin/sh", "-c", "yes s3cret-line"},
       false,
       "more than 100 bytes",
       "s3cret-line",
       small},
      {"control_bytes", {"printf", "s3cret\\nline2"}, false, "line feed", "s3cret", {}},
      {"empty_output", {"/bin/true"}, false, "empty", "", {}},
      {"no_command", {}, false, "no command", "", {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto start = std::chrono::steady_clock::now();
    Fetched f = runExec(c.argv, c.limits);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
    EXPECT_EQ(f.ok(), c.ok) << f.error;
    if (f.ok()) {
      EXPECT_EQ(f.secret->reveal(), c.want);
    } else {
      EXPECT_NE(f.error.find(c.want), std::string::npos) << f.error;
      if (*c.mustNotShow) {
        EXPECT_EQ(f.error.find(c.mustNotShow), std::string::npos) << f.error;
      }
    }
  }
}

TEST(ExecSource, StderrRepeatingThePreviousSecretIsWithheld) {
  auto previous = Secret::copyOf("old-token-value");
  Fetched f = runExec({"/bin/sh", "-c", "echo 'refresh failed for old-token-value' >&2; exit 1"},
                      {}, {}, previous.get());
  EXPECT_FALSE(f.ok());
  EXPECT_EQ(f.error.find("old-token-value"), std::string::npos) << f.error;
  EXPECT_NE(f.error.find("withheld"), std::string::npos) << f.error;
}

TEST(ExecSource, StopKillsTheCommandPromptly) {
  std::stop_source stop;
  std::jthread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop.request_stop();
  });
  auto start = std::chrono::steady_clock::now();
  Fetched f = runExec({"/bin/sleep", "30"}, {}, stop.get_token());
  EXPECT_FALSE(f.ok());
  EXPECT_NE(f.error.find("stopped"), std::string::npos) << f.error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(ExecSource, NoShellInterpretation) {
  // argv is passed as is: shell metacharacters are just bytes of an argument.
  Fetched f = runExec({"printf", "%s", "a;$(id)|b"}, {});
  ASSERT_TRUE(f.ok()) << f.error;
  EXPECT_EQ(f.secret->reveal(), "a;$(id)|b");
}

}  // namespace
}  // namespace sandgate::broker
