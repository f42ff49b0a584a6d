// Unit tests of the mount plan: what is hidden, what is dropped, and the order of the steps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "sandbox/filesystem.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace sandgate::sandbox {
namespace {

using K = MountStep::Kind;

int indexOf(const FilesystemPlan& p, const std::string& path, K kind) {
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (p.steps[i].path == path && p.steps[i].kind == kind) return static_cast<int>(i);
  }
  return -1;
}

TEST(FilesystemPlan, AnAllowlistNotTheHostRoot) {
  testing::TempDir ws;
  auto plan = planFilesystem(Options{}, ws.path());
  for (const char* p : {"/tmp", "/run"}) EXPECT_GE(indexOf(plan, p, K::kTmpfs), 0) << p;
  EXPECT_GE(indexOf(plan, "/dev", K::kDev), 0);
  EXPECT_GE(indexOf(plan, "/proc", K::kProc), 0);
  EXPECT_GE(indexOf(plan, "/sys", K::kSys), 0);
  EXPECT_GE(indexOf(plan, "/usr", K::kReadOnly), 0);
  EXPECT_GE(indexOf(plan, "/etc", K::kReadOnly), 0);
  for (const char* p : {"/home", "/var", "/root", "/opt", "/srv"}) {
    EXPECT_GE(indexOf(plan, p, K::kEmptyDir), 0) << p;
  }
  EXPECT_GE(indexOf(plan, ws.path(), K::kWorkspace), 0);
  for (const auto& step : plan.steps) {
    EXPECT_NE(step.path, "/") << "the host root is never bound";
    if (step.kind == K::kReadOnly) {
      EXPECT_TRUE(std::find(systemDirectories().begin(), systemDirectories().end(), step.path) !=
                  systemDirectories().end())
          << step.path << " is shown without being asked for";
    }
  }
}

TEST(FilesystemPlan, HiddenPathsOnlyWhereTheViewShowsThem) {
  testing::TempDir base;
  std::string shown = base.path() + "/shown";
  std::filesystem::create_directories(shown + "/creds");
  std::ofstream(shown + "/creds/key") << "x";
  std::filesystem::create_directories(base.path() + "/elsewhere");
  std::ofstream(base.path() + "/elsewhere/key") << "x";
  std::filesystem::create_directory_symlink(shown + "/creds", base.path() + "/link-to-creds");
  testing::TempDir ws;
  Options o;
  o.readOnlyPaths = {shown};
  o.hiddenPaths = {base.path() + "/link-to-creds/key", base.path() + "/elsewhere/key",
                   "/nonexistent/sandgate"};
  auto plan = planFilesystem(o, ws.path());
  EXPECT_GE(indexOf(plan, shown, K::kReadOnly), 0);
  // Hidden at the link's target, as the directory that holds the file, left out of its parent
  // (rebuilt without it) rather than covered: a mount over it would name it in mountinfo.
  EXPECT_EQ(indexOf(plan, shown + "/creds", K::kHideDir), -1);
  int rebuilt = indexOf(plan, shown, K::kLeaveOut);
  ASSERT_GE(rebuilt, 0);
  EXPECT_EQ(plan.steps[rebuilt].leaveOut, std::vector<std::string>{"creds"});
  EXPECT_GT(rebuilt, indexOf(plan, shown, K::kReadOnly));
  // Not in the view at all: nothing to hide.
  EXPECT_EQ(indexOf(plan, base.path() + "/elsewhere", K::kHideDir), -1);
  EXPECT_EQ(indexOf(plan, "/nonexistent", K::kHideDir), -1);
}

TEST(FilesystemPlan, ADirectoryLeftOutIsNotRebuiltForASecretInside) {
  // creds is left out of shown; a secret in creds/sub must not make creds rebuilt (which would
  // show what else creds holds).
  testing::TempDir base;
  std::string shown = base.path() + "/shown";
  std::filesystem::create_directories(shown + "/creds/sub");
  std::ofstream(shown + "/creds/sub/key") << "x";
  std::ofstream(shown + "/creds/other") << "x";
  testing::TempDir ws;
  Options o;
  o.readOnlyPaths = {shown};
  o.hiddenPaths = {shown + "/creds", shown + "/creds/sub/key"};
  auto plan = planFilesystem(o, ws.path());
  int rebuilt = indexOf(plan, shown, K::kLeaveOut);
  ASSERT_GE(rebuilt, 0);
  EXPECT_EQ(plan.steps[rebuilt].leaveOut, std::vector<std::string>{"creds"});
  EXPECT_EQ(indexOf(plan, shown + "/creds", K::kLeaveOut), -1);
}

TEST(FilesystemPlan, SecretsInTheWorkspaceAreCoveredThere) {
  // A rebuilt directory is read-only: in the workspace, where the run writes, a secret is
  // covered where it is instead.
  testing::TempDir ws;
  std::filesystem::create_directories(ws.path() + "/keys");
  std::ofstream(ws.path() + "/keys/key") << "x";
  Options o;
  o.hiddenPaths = {ws.path() + "/keys/key"};
  auto plan = planFilesystem(o, ws.path());
  EXPECT_GE(indexOf(plan, ws.path() + "/keys", K::kHideDir), 0);
  EXPECT_EQ(indexOf(plan, ws.path(), K::kLeaveOut), -1);
}

TEST(FilesystemPlan, EtcSecretsAreHidden) {
  testing::TempDir ws;
  auto plan = planFilesystem(Options{}, ws.path());
  if (std::filesystem::exists("/etc/shadow")) {
    EXPECT_GE(indexOf(plan, "/etc/shadow", K::kHideFile), 0);
  }
  EXPECT_GT(indexOf(plan, "/etc/shadow", K::kHideFile), indexOf(plan, "/etc", K::kReadOnly));
}

}  // namespace
}  // namespace sandgate::sandbox
