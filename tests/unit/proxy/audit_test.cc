// Tests of proxy/audit: the canonical JSON line, escaping of hostile bytes, file handling,
// one line per record under concurrency, write errors and reopen.
#include "proxy/observe/audit.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "proxy/observe/audit_fields.h"

namespace sandgate::proxy {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "sandgate-audit-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path operator/(const std::string& p) const { return fs::path(path_) / p; }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

AuditRecord sample() {
  AuditRecord r;
  r.time = sys_days{2024y / 5 / 1} + 12h + 3min + 4s + 56ms + 789us;
  r.kind = "forward";
  r.task = "demo";
  r.client = "127.0.0.1:50000";
  r.listener = "127.0.0.1:3128";
  r.method = "GET";
  r.scheme = "http";
  r.host = "example.com";
  r.port = 80;
  r.path = "/index.html";
  r.verdict = Outcome::kAllow;
  r.reason = "allowed";
  r.rule = "sandgate.yaml:12";
  r.credential = "openai";
  r.injected = true;
  r.status = 200;
  r.bytesUp = 123;
  r.bytesDown = 9876543210;
  r.durationSeconds = 0.0123456;
  r.upstream = "127.0.0.1:8080";
  r.error = "";
  r.requestId = "0123456789abcdef-2";
  r.connectionId = "0123456789abcdef";
  r.run = "20261204-211500-ab12";
  return r;
}

// Parses one line, requiring exactly one trailing newline and no other.
json::object parseLine(const std::string& line) {
  EXPECT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  json::error_code ec;
  json::value v = json::parse(line, ec);  // the parser rejects invalid UTF-8
  EXPECT_FALSE(ec) << ec.message() << " in " << line;
  EXPECT_TRUE(v.is_object());
  return v.is_object() ? v.as_object() : json::object{};
}

std::vector<std::string> readLines(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line + "\n");
  return lines;
}

TEST(AuditFormat, EveryFieldInCanonicalOrder) {
  auto obj = parseLine(AuditLog::format(sample()));
  const std::vector<std::string_view> order = {
      field::kTime,    field::kKind,      field::kRequestId,  field::kConnectionId, field::kRun,
      field::kTask,    field::kClient,    field::kListener,   field::kMode,         field::kMethod,
      field::kScheme,  field::kHost,      field::kPort,       field::kPath,         field::kVerdict,
      field::kReason,  field::kRule,      field::kCredential, field::kInjected,     field::kStatus,
      field::kBytesUp, field::kBytesDown, field::kDuration,   field::kUpstream,     field::kParent,
      field::kError,   field::kGit,       field::kBudget,     field::kLlm,
      field::kBudgetFailOpen, field::kApproval};
  ASSERT_EQ(obj.size(), order.size());
  size_t i = 0;
  for (const auto& kv : obj) EXPECT_EQ(kv.key(), order[i++]);

  EXPECT_EQ(obj.at(field::kTime), "2024-05-01T12:03:04.056Z");
  EXPECT_EQ(obj.at(field::kKind), "forward");
  EXPECT_EQ(obj.at(field::kRequestId), "0123456789abcdef-2");
  EXPECT_EQ(obj.at(field::kConnectionId), "0123456789abcdef");
  EXPECT_EQ(obj.at(field::kRun), "20261204-211500-ab12");
  EXPECT_EQ(obj.at(field::kTask), "demo");
  EXPECT_EQ(obj.at(field::kClient), "127.0.0.1:50000");
  EXPECT_EQ(obj.at(field::kListener), "127.0.0.1:3128");
  EXPECT_EQ(obj.at(field::kMode), "proxy");
  EXPECT_EQ(obj.at(field::kMethod), "GET");
  EXPECT_EQ(obj.at(field::kScheme), "http");
  EXPECT_EQ(obj.at(field::kHost), "example.com");
  EXPECT_EQ(obj.at(field::kPort).as_int64(), 80);
  EXPECT_EQ(obj.at(field::kPath), "/index.html");
  EXPECT_EQ(obj.at(field::kVerdict), "allow");
  EXPECT_EQ(obj.at(field::kReason), "allowed");
  EXPECT_EQ(obj.at(field::kRule), "sandgate.yaml:12");
  EXPECT_EQ(obj.at(field::kCredential), "openai");
  EXPECT_TRUE(obj.at(field::kInjected).as_bool());
  EXPECT_EQ(obj.at(field::kStatus).as_int64(), 200);
  EXPECT_EQ(obj.at(field::kBytesUp).to_number<uint64_t>(), 123u);
  EXPECT_EQ(obj.at(field::kBytesDown).to_number<uint64_t>(), 9876543210u);
  EXPECT_DOUBLE_EQ(obj.at(field::kDuration).to_number<double>(), 12.346);
  EXPECT_EQ(obj.at(field::kUpstream), "127.0.0.1:8080");
  EXPECT_TRUE(obj.at(field::kError).is_null());
}

TEST(AuditFormat, GitRequestsCarryTheirRepositoryAndEachRef) {
  AuditRecord r = sample();
  EXPECT_TRUE(parseLine(AuditLog::format(r)).at(field::kGit).is_null());
  r.git.emplace();
  r.git->repository = "acme/widgets";
  r.git->service = "receive-pack";
  for (size_t i = 0; i < AuditLog::kMaxGitRefs + 10; ++i) {
    r.git->refs.push_back({"refs/heads/b" + std::to_string(i), std::string(40, 'a'),
                           std::string(40, '0'),
                           i == 0 ? "git_ref_delete_not_allowed" : "allowed"});
  }
  auto git = parseLine(AuditLog::format(r)).at(field::kGit).as_object();
  EXPECT_EQ(git.at(field::kGitRepository), "acme/widgets");
  EXPECT_EQ(git.at(field::kGitService), "receive-pack");
  const auto& refs = git.at(field::kGitRefs).as_array();
  ASSERT_EQ(refs.size(), AuditLog::kMaxGitRefs);  // bounded, whatever the push names
  const auto& first = refs[0].as_object();
  EXPECT_EQ(first.at(field::kGitRef), "refs/heads/b0");
  EXPECT_EQ(std::string(first.at(field::kGitOld).as_string()), std::string(40, 'a'));
  EXPECT_EQ(std::string(first.at(field::kGitNew).as_string()), std::string(40, '0'));
  EXPECT_EQ(first.at(field::kReason), "git_ref_delete_not_allowed");
}

TEST(AuditFormat, ABudgetRefusalNamesTheBudgetWindowUsedAndLimit) {
  AuditRecord r = sample();
  EXPECT_TRUE(parseLine(AuditLog::format(r)).at(field::kBudget).is_null());
  r.budget = BudgetAudit{"per-minute", "minute", "requests", 600, 600};
  auto b = parseLine(AuditLog::format(r)).at(field::kBudget).as_object();
  EXPECT_EQ(b.at(field::kBudgetName), "per-minute");
  EXPECT_EQ(b.at(field::kBudgetWindow), "minute");
  EXPECT_EQ(b.at(field::kBudgetMetric), "requests");
  EXPECT_EQ(b.at(field::kBudgetUsed).to_number<int64_t>(), 600);
  EXPECT_EQ(b.at(field::kBudgetLimit).to_number<int64_t>(), 600);
}

TEST(AuditFormat, FieldNamesAreTheDocumentedOnes) {
  EXPECT_EQ(field::kTime, "time");
  EXPECT_EQ(field::kBytesUp, "bytes_up");
  EXPECT_EQ(field::kBytesDown, "bytes_down");
  EXPECT_EQ(field::kDuration, "duration_ms");
}

TEST(AuditFormat, EmptyStringsAreNull) {
  AuditRecord r;  // a refusal of an unidentified client: most fields unknown
  r.kind = "refusal";
  r.verdict = Outcome::kDeny;
  r.reason = "unknown_task";
  r.status = 407;
  auto obj = parseLine(AuditLog::format(r));
  for (auto f : {field::kTask, field::kClient, field::kListener, field::kMethod, field::kScheme,
                 field::kHost, field::kPath, field::kRule, field::kCredential, field::kUpstream,
                 field::kError}) {
    EXPECT_TRUE(obj.at(f).is_null()) << f;
  }
  EXPECT_EQ(obj.at(field::kPort).as_int64(), 0);
  EXPECT_FALSE(obj.at(field::kInjected).as_bool());
  EXPECT_EQ(obj.at(field::kStatus).as_int64(), 407);
  EXPECT_EQ(obj.at(field::kTime), "1970-01-01T00:00:00.000Z");
}

TEST(AuditFormat, TimeIsUtcWithMillisecondsFlooredEvenBeforeTheEpoch) {
  AuditRecord r;
  r.time = system_clock::time_point(-1ms);
  EXPECT_EQ(parseLine(AuditLog::format(r)).at(field::kTime), "1969-12-31T23:59:59.999Z");
  r.time = sys_days{2038y / 1 / 19} + 3h + 14min + 8s + 999ms + 999us;
  EXPECT_EQ(parseLine(AuditLog::format(r)).at(field::kTime), "2038-01-19T03:14:08.999Z");
  r.time = sys_days{2026y / 3 / 4} + 5h + 6min + 7s + 8ms;
  EXPECT_EQ(parseLine(AuditLog::format(r)).at(field::kTime), "2026-03-04T05:06:07.008Z");
  // The ends of the clock's range (64-bit nanoseconds here).
  r.time = system_clock::time_point::min();
  EXPECT_EQ(parseLine(AuditLog::format(r)).at(field::kTime), "1677-09-21T00:12:43.145Z");
  r.time = system_clock::time_point::max();
  EXPECT_EQ(parseLine(AuditLog::format(r)).at(field::kTime), "2262-04-11T23:47:16.854Z");
}

TEST(AuditFormat, DurationIsNeverNegativeOrNonFinite) {
  struct Case {
    const char* name;
    double seconds;
    double ms;
  };
  for (const Case& c :
       {Case{"zero", 0, 0}, Case{"negative", -1.5, 0}, Case{"nan", std::nan(""), 0},
        Case{"inf", HUGE_VAL, 0}, Case{"two_seconds", 2, 2000}, Case{"microsecond", 1e-6, 0.001}}) {
    AuditRecord r;
    r.durationSeconds = c.seconds;
    EXPECT_DOUBLE_EQ(parseLine(AuditLog::format(r)).at(field::kDuration).to_number<double>(), c.ms)
        << c.name;
  }
}

TEST(AuditFormat, HostileBytesAreEscapedAndTheLineStaysValid) {
  const std::string fffd = "\xef\xbf\xbd";
  struct Case {
    const char* name;
    std::string input;
    std::string decoded;         // what a JSON reader gets back
    std::string rawMustContain;  // how it appears in the line
  };
  const std::vector<Case> cases = {
      {"quote_backslash", "a\"b\\c", "a\"b\\c", R"(a\"b\\c)"},
      {"forged_line", "x\r\n{\"kind\":\"forged\"}", "x\r\n{\"kind\":\"forged\"}", R"(x\r\n{\")"},
      {"c0_controls", std::string("\x00\x01\x1b[31m\x1f", 8),
       std::string("\x00\x01\x1b[31m\x1f", 8), R"(\u0000\u0001\u001b[31m\u001f)"},
      {"del", "a\x7f", "a\x7f", R"(a\u007f)"},
      {"c1_csi",
       "a\xc2\x9b"
       "2J",
       "a\xc2\x9b"
       "2J",
       R"(a\u009b2J)"},
      {"line_separators",
       "a\xe2\x80\xa8"
       "b\xe2\x80\xa9",
       "a\xe2\x80\xa8"
       "b\xe2\x80\xa9",
       R"(a\u2028b\u2029)"},
      {"lone_byte",
       "a\xff"
       "b",
       "a" + fffd + "b", R"(a\ufffdb)"},
      {"overlong_slash", "\xc0\xaf", fffd + fffd, R"(\ufffd\ufffd)"},
      {"surrogate", "\xed\xa0\x80", fffd + fffd + fffd, R"(\ufffd\ufffd\ufffd)"},
      {"above_max", "\xf4\x90\x80\x80", fffd + fffd + fffd + fffd, R"(\ufffd\ufffd\ufffd\ufffd)"},
      {"truncated_at_end", "ok\xe2\x82", "ok" + fffd + fffd, R"(ok\ufffd\ufffd)"},
      {"valid_utf8_kept", "h\xc3\xa9llo \xe2\x98\x83 \xf0\x9f\x98\x80",
       "h\xc3\xa9llo \xe2\x98\x83 \xf0\x9f\x98\x80", "h\xc3\xa9llo \xe2\x98\x83 \xf0\x9f\x98\x80"},
  };
  for (const auto& c : cases) {
    AuditRecord r;
    r.host = c.input;
    r.path = c.input;
    r.error = c.input;
    std::string line = AuditLog::format(r);
    EXPECT_NE(line.find(c.rawMustContain), std::string::npos) << c.name << ": " << line;
    auto obj = parseLine(line);
    for (auto f : {field::kHost, field::kPath, field::kError}) {
      ASSERT_TRUE(obj.at(f).is_string()) << c.name;
      EXPECT_EQ(std::string(obj.at(f).as_string()), c.decoded) << c.name << " " << f;
    }
  }
}

TEST(AuditFormat, EveryByteValueYieldsValidJson) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  AuditRecord r;
  r.path = all + all;
  auto obj = parseLine(AuditLog::format(r));
  EXPECT_TRUE(obj.at(field::kPath).is_string());
}

TEST(AuditFormat, LongFieldsAreCapped) {
  AuditRecord r;
  r.path = "/" + std::string(3 * AuditLog::kMaxFieldBytes, 'a');
  r.error = std::string(2 * AuditLog::kMaxFieldBytes, 'e');
  auto obj = parseLine(AuditLog::format(r));
  EXPECT_EQ(obj.at(field::kPath).as_string().size(), AuditLog::kMaxFieldBytes);
  EXPECT_EQ(obj.at(field::kError).as_string().size(), AuditLog::kMaxFieldBytes);
}

TEST(AuditLogFile, CreatesWithMode0640WhateverTheUmask) {
  TempDir dir;
  auto path = dir / "audit.log";
  mode_t old = ::umask(0077);
  auto log = AuditLog::open(path.string());
  ::umask(old);
  ASSERT_TRUE(log.ok()) << log.errorText();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);

  (*log)->write(sample());
  auto r = sample();
  r.task = "second";
  (*log)->write(r);
  auto lines = readLines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], AuditLog::format(sample()));
  EXPECT_EQ(parseLine(lines[1]).at(field::kTask), "second");
  EXPECT_EQ((*log)->writeErrors(), 0u);
}

TEST(AuditLogFile, AppendsToAnExistingFileAndKeepsItsMode) {
  TempDir dir;
  auto path = dir / "audit.log";
  { std::ofstream(path) << "previous\n"; }
  ::chmod(path.c_str(), 0600);
  auto log = AuditLog::open(path.string());
  ASSERT_TRUE(log.ok()) << log.errorText();
  (*log)->write(sample());
  auto lines = readLines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "previous\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST(AuditLogFile, DescriptorIsCloseOnExec) {
  TempDir dir;
  auto path = dir / "audit.log";
  auto log = AuditLog::open(path.string());
  ASSERT_TRUE(log.ok());
  // Find our descriptor through /proc: the one whose link is the audit file.
  bool found = false;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec) == path) {
      int fd = std::stoi(e.path().filename().string());
      int flags = ::fcntl(fd, F_GETFD);
      EXPECT_TRUE(flags & FD_CLOEXEC);
      EXPECT_TRUE(::fcntl(fd, F_GETFL) & O_APPEND);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST(AuditLogFile, MissingDirectoryIsAClearDiagnostic) {
  TempDir dir;
  auto path = dir / "no-such-dir" / "audit.log";
  auto log = AuditLog::open(path.string());
  ASSERT_FALSE(log.ok());
  ASSERT_EQ(log.errors().size(), 1u);
  EXPECT_EQ(log.errors()[0].keyPath, "audit.path");
  EXPECT_NE(log.errorText().find("does not exist"), std::string::npos) << log.errorText();
  EXPECT_NE(log.errorText().find((dir / "no-such-dir").string()), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "no-such-dir"));  // not created behind the operator's back
}

TEST(AuditLogFile, OtherOpenErrorsNameTheCause) {
  TempDir dir;
  auto log = AuditLog::open(dir.str());  // a directory
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.errorText().find("Is a directory"), std::string::npos) << log.errorText();
  EXPECT_FALSE(AuditLog::open(std::string()).ok());
}

TEST(AuditLogFile, FailedWritesAreCountedNotThrown) {
  auto log = AuditLog::open(std::string("/dev/full"));
  ASSERT_TRUE(log.ok()) << log.errorText();
  (*log)->write(sample());
  (*log)->write(sample());
  EXPECT_EQ((*log)->writeErrors(), 2u);
}

TEST(AuditLogFile, ConcurrentWritersProduceWholeLines) {
  TempDir dir;
  auto path = dir / "audit.log";
  auto log = AuditLog::open(path.string());
  ASSERT_TRUE(log.ok());
  constexpr int kThreads = 8, kRecords = 400;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRecords; ++i) {
        AuditRecord r = sample();
        r.task = "t" + std::to_string(t);
        r.status = i;
        r.path = "/" + std::string(static_cast<size_t>((i * 37) % 6000), 'p');  // > PIPE_BUF too
        (*log)->write(r);
      }
    });
  }
  for (auto& th : threads) th.join();
  auto lines = readLines(path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kRecords));
  std::set<std::pair<std::string, int64_t>> seen;
  for (const auto& l : lines) {
    auto obj = parseLine(l);
    seen.emplace(std::string(obj.at(field::kTask).as_string()), obj.at(field::kStatus).as_int64());
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kRecords));
}

// stdout mode, redirected into a pipe: lines larger than PIPE_BUF are not atomic in the
// kernel, so this checks that the writer keeps each line contiguous itself.
TEST(AuditLogStdout, ConcurrentLargeLinesThroughAPipeStayWhole) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  // A one-page pipe: every line below is larger, so each write(2) has to wait for the reader
  // part-way through and the kernel would let another writer's bytes in between.
  ASSERT_GE(::fcntl(p[1], F_SETPIPE_SZ, 4096), 0);
  std::fflush(stdout);
  int saved = ::dup(STDOUT_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_EQ(::dup2(p[1], STDOUT_FILENO), STDOUT_FILENO);
  ::close(p[1]);
  std::string captured;
  std::thread reader([&] {
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(p[0], buf, sizeof buf);
      if (n <= 0) break;
      captured.append(buf, static_cast<size_t>(n));
    }
  });
  constexpr int kThreads = 4, kRecords = 200;
  {
    auto log = AuditLog::open(std::nullopt);
    ASSERT_TRUE(log.ok());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kRecords; ++i) {
          AuditRecord r = sample();
          r.task = "t" + std::to_string(t);
          r.status = i;
          r.path = "/" + std::string(7000, static_cast<char>('a' + t));
          (*log)->write(r);
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  ::dup2(saved, STDOUT_FILENO);  // closes the pipe's last write end: the reader sees EOF
  ::close(saved);
  reader.join();
  ::close(p[0]);
  std::istringstream in(captured);
  std::string line;
  int count = 0, whole = 0;
  while (std::getline(in, line)) {
    ++count;
    json::error_code ec;
    json::value v = json::parse(line, ec);
    if (ec || !v.is_object()) continue;
    const auto& obj = v.as_object();
    std::string task(obj.at(field::kTask).as_string());
    if (task.size() == 2 && std::string(obj.at(field::kPath).as_string()) ==
                                "/" + std::string(7000, static_cast<char>('a' + (task[1] - '0')))) {
      ++whole;
    }
  }
  EXPECT_EQ(whole, kThreads * kRecords);
  EXPECT_EQ(count, kThreads * kRecords);
}

TEST(AuditLogFile, ReopenFollowsRotation) {
  TempDir dir;
  auto path = dir / "audit.log";
  auto log = AuditLog::open(path.string());
  ASSERT_TRUE(log.ok());
  (*log)->write(sample());
  fs::rename(path, dir / "audit.log.1");
  (*log)->write(sample());  // still the old file until reopened
  EXPECT_EQ((*log)->reopen(), std::nullopt);
  (*log)->write(sample());
  EXPECT_EQ(readLines(dir / "audit.log.1").size(), 2u);
  EXPECT_EQ(readLines(path).size(), 1u);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

// A link anywhere on the path (a directory a sandbox could write, or a rotation that leaves a
// link behind) is refused, never written through: at open and at reopen.
TEST(AuditLogFile, NoLinkIsFollowedAtOpenOrReopen) {
  TempDir dir;
  fs::create_directory(dir / "victimdir");
  fs::create_directory(dir / "logs");
  fs::create_directory_symlink(dir / "victimdir", dir / "link");
  fs::create_symlink(dir / "victimdir" / "file", dir / "logs" / "linked.log");
  for (const auto& path : {dir / "link" / "audit.log", dir / "logs" / "linked.log"}) {
    auto log = AuditLog::open(path.string());
    ASSERT_FALSE(log.ok()) << path;
    EXPECT_EQ(log.errors()[0].keyPath, "audit.path");
    EXPECT_NE(log.errorText().find("symbolic link"), std::string::npos) << log.errorText();
  }
  auto path = dir / "logs" / "audit.log";
  auto log = AuditLog::open(path.string());
  ASSERT_TRUE(log.ok()) << log.errorText();
  fs::rename(dir / "logs", dir / "logs.1");
  fs::create_directory_symlink(dir / "victimdir", dir / "logs");
  auto err = (*log)->reopen();
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->str().find("symbolic link"), std::string::npos) << err->str();
  (*log)->write(sample());
  EXPECT_EQ(readLines(dir / "logs.1" / "audit.log").size(), 1u);  // the old file stays
  EXPECT_TRUE(fs::is_empty(dir / "victimdir"));
}

TEST(AuditLogFile, FailedReopenKeepsTheOldFile) {
  TempDir dir;
  fs::create_directory(dir / "logs");
  auto path = dir / "logs" / "audit.log";
  auto log = AuditLog::open(path.string());
  ASSERT_TRUE(log.ok());
  fs::rename(dir / "logs", dir / "moved");
  auto err = (*log)->reopen();
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->str().find("does not exist"), std::string::npos) << err->str();
  (*log)->write(sample());
  EXPECT_EQ(readLines(dir / "moved" / "audit.log").size(), 1u);
  EXPECT_EQ((*log)->writeErrors(), 0u);
}

}  // namespace
}  // namespace sandgate::proxy
