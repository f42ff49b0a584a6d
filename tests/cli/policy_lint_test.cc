// `sandgate policy lint` (and the commands that load a config the same way: check, serve, run)
// end to end: every problem of a config in one pass, and what lint says about secret sources.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/run_process.h"

namespace sandgate {
namespace {

namespace fs = std::filesystem;
using testing::ProcessResult;
using testing::runProcess;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class PolicyLint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sandgate-lint-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    auto p = dir_ / name;
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p.string();
  }

  ProcessResult run(std::vector<std::string> args) {
    args.insert(args.begin(), SANDGATE_BINARY);
    return runProcess(args, 30);
  }

  fs::path dir_;
};

// One problem of each kind, each in a part the others do not depend on: a misspelt key and a
// wrong type (the loader's schema), a reference to nothing (the loader's references), and a
// host pattern, a regular expression and a CIDR that only the policy compiler reads. Before,
// the compiler's three appeared only once the loader's four were fixed.
constexpr const char* kEveryKind = R"(policies:
  typo:
    alow:
      - host: a.test
  rules:
    allow:
      - host: "*.com"
      - host: "re:(unclosed"
      - host: ok.test
        cidrs: [10.0.0.0/33]
      - host: b.test
        ports: [http]
      - host: c.test
        credential: nokey
tasks:
  - name: t
    policy: rules
  - name: u
    policy: missing
)";

const char* const kEveryLocation[] = {
    ":3:5:", ":7:15:", ":8:15:", ":10:17:", ":12:17:", ":14:21:", ":19:13:"};

void expectEveryProblem(const std::string& file, const ProcessResult& r) {
  for (const char* at : kEveryLocation) {
    EXPECT_NE(r.err.find(file + at), std::string::npos) << "missing " << at << " in\n" << r.err;
  }
  // What the loader reported is not said again by the compiler in its own words.
  EXPECT_EQ(count(r.err, "nokey"), 1u) << r.err;
  EXPECT_EQ(count(r.err, "`missing`"), 1u) << r.err;
}

TEST_F(PolicyLint, ReportsEveryKindOfProblemInOnePass) {
  auto file = write("every.yaml", kEveryKind);
  auto r = run({"policy", "lint", file});
  EXPECT_EQ(r.status, 1) << r.err;
  expectEveryProblem(file, r);
  EXPECT_NE(r.err.find(file + ": invalid: 7 errors"), std::string::npos) << r.err;
}

TEST_F(PolicyLint, CheckServeAndRunReportEveryProblemToo) {
  auto file = write("every.yaml", kEveryKind);
  {
    SCOPED_TRACE("policy check");
    auto r = run({"policy", "check", "--config", file, "--task", "t", "ok.test:443"});
    EXPECT_EQ(r.status, 2) << r.err;
    expectEveryProblem(file, r);
  }
  {
    SCOPED_TRACE("serve");
    auto r = run({"serve", "--config", file});
    EXPECT_EQ(r.status, 2) << r.err;
    expectEveryProblem(file, r);
  }
  {
    SCOPED_TRACE("run");
    auto r = run({"run", "--config", file, "--run-dir", (dir_ / "run").string(), "--", "true"});
    EXPECT_EQ(r.status, 2) << r.err;
    expectEveryProblem(file, r);
    EXPECT_FALSE(fs::exists(dir_ / "run"));  // refused before anything was made for it
  }
}

TEST_F(PolicyLint, CompilerProblemsAloneAreCountedToo) {
  auto file = write("rules.yaml",
                    "policies:\n  p:\n    allow:\n      - host: \"*.com\"\n"
                    "      - host: \"re:(x\"\n"
                    "tasks:\n  - name: t\n    policy: p\n");
  auto r = run({"policy", "lint", file});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(file + ":4:15:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(file + ":5:15:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(file + ": invalid: 2 errors"), std::string::npos) << r.err;
}

// One credential of each source kind, each with a problem serve would refuse to start on.
std::string sourcesConfig(const std::string& dir) {
  return R"(credentials:
  missing:
    source: { file: )" +
         dir + R"(/no-such-secret }
    hosts: [a.test]
    inject: { header: X-Key }
  empty:
    source: { file: )" +
         dir + R"(/empty-secret }
    hosts: [b.test]
    inject: { header: X-Key }
  unset:
    source: { env: SANDGATE_LINT_TEST_UNSET_VARIABLE }
    hosts: [c.test]
    inject: { header: X-Key }
  noprogram:
    source: { exec: [)" +
         dir + R"(/no-such-helper] }
    hosts: [d.test]
    inject: { header: X-Key }
  fine:
    source: { exec: [/bin/sh, -c, "touch )" +
         dir + R"(/ran; echo s3cr3t"] }
    hosts: [e.test]
    inject: { header: X-Key }
  shared:
    source: { file: )" +
         dir + R"(/shared-secret }
    hosts: [f.test]
    inject: { header: X-Key }
  maybe:
    source: { file: )" +
         dir + R"(/no-such-optional }
    optional: true
    hosts: [g.test]
    inject: { header: X-Key }
policies:
  p:
    allow:
      - host: a.test
tasks:
  - name: t
    policy: p
)";
}

TEST_F(PolicyLint, SaysItDidNotOpenSecretSources) {
  auto file = write("sources.yaml", sourcesConfig(dir_.string()));
  auto r = run({"policy", "lint", file});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("secret sources: not opened (--check-sources opens them)"),
            std::string::npos)
      << r.out;
}

TEST_F(PolicyLint, CheckSourcesOpensEachSourceAndRunsNothing) {
  write("empty-secret", "");
  write("shared-secret", "s3cr3t-value\n", 0644);
  auto file = write("sources.yaml", sourcesConfig(dir_.string()));
  ::unsetenv("SANDGATE_LINT_TEST_UNSET_VARIABLE");
  auto r = run({"policy", "lint", "--check-sources", file});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  // Each with the line of its source.
  EXPECT_NE(r.err.find(file + ":3:13: credentials.missing.source"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir_.string() + "/no-such-secret"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(file + ":7:13: credentials.empty.source"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(file + ":11:13: credentials.unset.source"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SANDGATE_LINT_TEST_UNSET_VARIABLE is not set"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(file + ":15:13: credentials.noprogram.source"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no-such-helper does not exist"), std::string::npos) << r.err;
  // Warnings: a secret others may read, and an optional credential's missing file.
  EXPECT_NE(r.err.find("warning: " + file + ":23:13: credentials.shared.source"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("readable by every user (mode 0644)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("warning: " + file + ":27:13: credentials.maybe.source"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("credentials.fine"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(file + ": invalid: 4 errors, 2 warnings"), std::string::npos) << r.err;
  // The exec source's program was found, never run; no secret is ever printed.
  EXPECT_FALSE(fs::exists(dir_ / "ran"));
  EXPECT_EQ((r.out + r.err).find("s3cr3t-value"), std::string::npos);
}

TEST_F(PolicyLint, CheckSourcesPassesWhenEverySourceIsThere) {
  write("key", "k3y\n");
  auto file = write("ok.yaml", R"(credentials:
  k:
    source: { file: )" + (dir_ / "key").string() +
                                   R"( }
    hosts: [a.test]
    inject: { header: X-Key }
  e:
    source: { env: SANDGATE_LINT_TEST_SET_VARIABLE }
    hosts: [b.test]
    inject: { header: X-Key }
  x:
    source: { exec: [sh, -c, "echo x"] }
    hosts: [c.test]
    inject: { header: X-Key }
policies:
  p:
    allow:
      - host: a.test
tasks:
  - name: t
    policy: p
)");
  ::setenv("SANDGATE_LINT_TEST_SET_VARIABLE", "value", 1);
  auto r = run({"policy", "lint", "--check-sources", file});
  ::unsetenv("SANDGATE_LINT_TEST_SET_VARIABLE");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("secret sources: 3 checked; exec: the program checked, not run"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace sandgate
