// Tests of proxy/cpu_budget: cpu.max and CFS quota parsing, /proc/self/cgroup lines, and the
// budget from cgroup trees laid out in a temp dir (v2 with the limit on a parent, v1, none).
#include "proxy/server/cpu_budget.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace sandgate::proxy {
namespace {

namespace fs = std::filesystem;

TEST(CpuBudget, ParsesCpuMax) {
  struct Case {
    const char* name;
    const char* text;
    std::optional<double> want;
  } cases[] = {
      {"two cpus", "200000 100000\n", 2.0},
      {"one and a half", "150000 100000", 1.5},
      {"a fifth", "20000 100000\n", 0.2},
      {"no limit", "max 100000\n", std::nullopt},
      {"empty", "", std::nullopt},
      {"one field", "100000", std::nullopt},
      {"zero period", "100000 0", std::nullopt},
      {"negative", "-1 100000", std::nullopt},
      {"garbage", "lots 100000", std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(parseCpuMax(c.text), c.want);
  }
}

TEST(CpuBudget, ParsesCfsQuota) {
  EXPECT_EQ(parseCfsQuota("300000\n", "100000\n"), 3.0);
  EXPECT_EQ(parseCfsQuota("50000", "100000"), 0.5);
  EXPECT_EQ(parseCfsQuota("-1\n", "100000\n"), std::nullopt);  // no quota
  EXPECT_EQ(parseCfsQuota("100000", "0"), std::nullopt);
  EXPECT_EQ(parseCfsQuota("x", "100000"), std::nullopt);
}

TEST(CpuBudget, FindsTheCgroupPath) {
  const std::string v2 = "0::/kubepods/burstable/pod1/abc\n";
  EXPECT_EQ(cgroupPath(v2), "/kubepods/burstable/pod1/abc");
  EXPECT_EQ(cgroupPath(v2, "cpu"), std::nullopt);
  const std::string v1 =
      "12:memory:/docker/x\n4:cpu,cpuacct:/docker/x\n1:name=systemd:/init.scope\n0::/odd:name\n";
  EXPECT_EQ(cgroupPath(v1, "cpu"), "/docker/x");
  EXPECT_EQ(cgroupPath(v1, "cpuacct"), "/docker/x");
  EXPECT_EQ(cgroupPath(v1, "cpuset"), std::nullopt);
  EXPECT_EQ(cgroupPath(v1), "/odd:name");  // the path may hold ':'
  EXPECT_EQ(cgroupPath(""), std::nullopt);
}

// A cgroup tree laid out under a temp dir, and what the budget must be for it.
struct TreeCase {
  const char* name;
  std::vector<std::pair<std::string, std::string>> files;  // path under the root -> content
  const char* procSelfCgroup;
  unsigned affinity;
  unsigned want;
  const char* whyHas;  // a piece of the log reason
};

TEST(CpuBudget, FromCgroupTrees) {
  const TreeCase cases[] = {
      {"v2 quota on a parent, rounded up, below the affinity mask",
       {{"cgroup.controllers", "cpu memory\n"},
        {"kubepods/pod1/cpu.max", "max 100000\n"},
        {"kubepods/pod1/ctr/cpu.max", "max 100000\n"},
        {"kubepods/cpu.max", "150000 100000\n"}},
       "0::/kubepods/pod1/ctr\n",
       8,
       2,
       "1.50 CPUs (ROOT/kubepods/cpu.max)"},
      {"v2 smallest quota wins; a fraction is one worker",
       {{"cgroup.controllers", "cpu\n"},
        {"a/cpu.max", "400000 100000\n"},
        {"a/b/cpu.max", "20000 100000\n"}},
       "0::/a/b\n",
       8,
       1,
       "0.20 CPUs"},
      // Inside a container the process sees itself at "/" and its limit at the mount's root.
      {"v2 in a cgroup namespace",
       {{"cgroup.controllers", "cpu\n"}, {"cpu.max", "300000 100000\n"}},
       "0::/\n",
       16,
       3,
       "3.00 CPUs"},
      {"v2 path not under this mount: the mount's root still counts",
       {{"cgroup.controllers", "cpu\n"}, {"cpu.max", "300000 100000\n"}},
       "0::/elsewhere/x\n",
       16,
       3,
       "3.00 CPUs"},
      {"affinity mask below the quota",
       {{"cgroup.controllers", "cpu\n"}, {"cpu.max", "400000 100000\n"}},
       "0::/\n",
       1,
       1,
       "1 CPUs in the affinity mask"},
      {"v2 no quota",
       {{"cgroup.controllers", "cpu\n"}, {"cpu.max", "max 100000\n"}},
       "0::/\n",
       6,
       6,
       "6 CPUs in the affinity mask"},
      {"v1 CFS quota under the container's path",
       {{"cpu,cpuacct/docker/x/cpu.cfs_quota_us", "250000\n"},
        {"cpu,cpuacct/docker/x/cpu.cfs_period_us", "100000\n"},
        {"cpu,cpuacct/cpu.cfs_quota_us", "-1\n"},
        {"cpu,cpuacct/cpu.cfs_period_us", "100000\n"}},
       "4:cpu,cpuacct:/docker/x\n0::/\n",
       8,
       3,
       "2.50 CPUs"},
      {"v1 unlimited",
       {{"cpu/cpu.cfs_quota_us", "-1\n"}, {"cpu/cpu.cfs_period_us", "100000\n"}},
       "3:cpu:/\n",
       4,
       4,
       "affinity"},
      {"nothing readable", {}, "", 4, 4, "affinity"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    char tmpl[] = "/tmp/sandgate-cpu-budget-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    const fs::path root = tmpl;
    for (const auto& [rel, text] : c.files) {
      fs::create_directories((root / rel).parent_path());
      std::ofstream(root / rel) << text;
    }
    auto b = cpuBudget(c.affinity, c.procSelfCgroup, root.string());
    EXPECT_EQ(b.cpus, c.want);
    std::string why = c.whyHas;
    if (auto at = why.find("ROOT"); at != std::string::npos) why.replace(at, 4, root.string());
    EXPECT_NE(b.why.find(why), std::string::npos) << b.why;
    fs::remove_all(root);
  }
}

TEST(CpuBudget, CurrentIsAtLeastOne) {
  auto b = currentCpuBudget();
  EXPECT_GE(b.cpus, 1u);
  EXPECT_FALSE(b.why.empty());
}

}  // namespace
}  // namespace sandgate::proxy
