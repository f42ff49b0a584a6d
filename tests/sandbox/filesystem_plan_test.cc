// Unit tests of the mount plan: what is hidden, what is dropped, and the order of the steps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

TEST(FilesystemPlan, ReplacesTmpRunDevProcAndHidesRoot) {
  testing::TempDir ws;
  auto plan = planFilesystem(Options{}, ws.path());
  for (const char* p : {"/tmp", "/run"}) EXPECT_GE(indexOf(plan, p, K::kTmpfs), 0) << p;
  EXPECT_GE(indexOf(plan, "/dev", K::kDev), 0);
  EXPECT_GE(indexOf(plan, "/proc", K::kProc), 0);
  EXPECT_GE(indexOf(plan, "/root", K::kHideDir), 0);
  EXPECT_GE(indexOf(plan, ws.path(), K::kWorkspace), 0);
}

TEST(FilesystemPlan, HiddenPathsResolvedDroppedOrKept) {
  testing::TempDir base;  // under /var/tmp: visible in the read-only root unless hidden
  std::string home = base.path() + "/home";
  std::filesystem::create_directories(home + "/.ssh");
  std::ofstream(home + "/.netrc") << "x";
  std::filesystem::create_directory_symlink(home + "/.ssh", base.path() + "/link-to-ssh");
  testing::TempDir tmpOnly("/tmp");
  std::filesystem::create_directory(tmpOnly.path() + "/secret");
  Options o;
  o.hiddenPaths = {base.path() + "/link-to-ssh", home + "/.netrc", "/nonexistent/sandgate",
                   tmpOnly.path() + "/secret"};
  std::string ws = base.path();
  auto plan = planFilesystem(o, ws);
  EXPECT_GE(indexOf(plan, home + "/.ssh", K::kHideDir), 0) << "a symlink is hidden at its target";
  EXPECT_GE(indexOf(plan, home + "/.netrc", K::kHideFile), 0);
  EXPECT_EQ(indexOf(plan, "/nonexistent/sandgate", K::kHideFile), -1);
  EXPECT_EQ(indexOf(plan, tmpOnly.path() + "/secret", K::kHideDir), -1)
      << "the private /tmp already hides it";
  // Hiding inside the workspace comes after binding the workspace.
  EXPECT_LT(indexOf(plan, ws, K::kWorkspace), indexOf(plan, home + "/.ssh", K::kHideDir));
}

TEST(FilesystemPlan, WorkspaceUnderTmpAndUnderHiddenDirComesLast) {
  testing::TempDir ws("/tmp");
  Options o;
  o.hiddenPaths = {ws.path() + "/inner"};
  std::filesystem::create_directory(ws.path() + "/inner");
  auto plan = planFilesystem(o, ws.path());
  EXPECT_LT(indexOf(plan, "/tmp", K::kTmpfs), indexOf(plan, ws.path(), K::kWorkspace));
  // Inside the workspace, a path under /tmp is still hidden.
  EXPECT_GT(indexOf(plan, ws.path() + "/inner", K::kHideDir),
            indexOf(plan, ws.path(), K::kWorkspace));
  // A workspace at a hidden path wins (same depth: the workspace goes last).
  auto plan2 = planFilesystem(Options{}, "/root");
  EXPECT_LT(indexOf(plan2, "/root", K::kHideDir), indexOf(plan2, "/root", K::kWorkspace));
}

}  // namespace
}  // namespace sandgate::sandbox
