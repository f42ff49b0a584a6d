// Tests of proxy/cpu_budget: cpu.max and CFS quota parsing, /proc/self/cgroup lines, and the
// budget from cgroup trees laid out in a temp dir (v2 with the limit on a parent, v1, none).
#include "proxy/cpu_budget.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

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

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandgate-cpu-budget-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  fs::path root_;
};

TEST_F(CgroupTree, V2QuotaOnAParentRoundsUpAndBeatsAffinity) {
  write("cgroup.controllers", "cpu memory\n");
  write("kubepods/pod1/cpu.max", "max 100000\n");
  write("kubepods/pod1/ctr/cpu.max", "max 100000\n");
  write("kubepods/cpu.max", "150000 100000\n");
  auto b = cpuBudget(8, "0::/kubepods/pod1/ctr\n", root_.string());
  EXPECT_EQ(b.cpus, 2u);
  EXPECT_NE(b.why.find("1.50"), std::string::npos) << b.why;
  EXPECT_NE(b.why.find("kubepods/cpu.max"), std::string::npos) << b.why;
}

TEST_F(CgroupTree, V2SmallestQuotaWinsAndAFractionIsOneWorker) {
  write("cgroup.controllers", "cpu\n");
  write("a/cpu.max", "400000 100000\n");
  write("a/b/cpu.max", "20000 100000\n");
  EXPECT_EQ(cpuBudget(8, "0::/a/b\n", root_.string()).cpus, 1u);
}

TEST_F(CgroupTree, V2InACgroupNamespaceReadsTheRoot) {
  // Inside a container the process sees itself at "/" and its limit at the mount's root.
  write("cgroup.controllers", "cpu\n");
  write("cpu.max", "300000 100000\n");
  EXPECT_EQ(cpuBudget(16, "0::/\n", root_.string()).cpus, 3u);
  // A path that is not under this mount (no cgroup namespace): the mount's root still counts.
  EXPECT_EQ(cpuBudget(16, "0::/elsewhere/x\n", root_.string()).cpus, 3u);
}

TEST_F(CgroupTree, AffinityBelowTheQuotaWins) {
  write("cgroup.controllers", "cpu\n");
  write("cpu.max", "400000 100000\n");
  auto b = cpuBudget(1, "0::/\n", root_.string());
  EXPECT_EQ(b.cpus, 1u);
  EXPECT_NE(b.why.find("affinity"), std::string::npos) << b.why;
}

TEST_F(CgroupTree, NoQuotaIsTheAffinityMask) {
  write("cgroup.controllers", "cpu\n");
  write("cpu.max", "max 100000\n");
  EXPECT_EQ(cpuBudget(6, "0::/\n", root_.string()).cpus, 6u);
}

TEST_F(CgroupTree, V1CfsQuota) {
  write("cpu,cpuacct/docker/x/cpu.cfs_quota_us", "250000\n");
  write("cpu,cpuacct/docker/x/cpu.cfs_period_us", "100000\n");
  write("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  write("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  auto b = cpuBudget(8, "4:cpu,cpuacct:/docker/x\n0::/\n", root_.string());
  EXPECT_EQ(b.cpus, 3u);
  EXPECT_NE(b.why.find("2.50"), std::string::npos) << b.why;
}

TEST_F(CgroupTree, V1UnlimitedAndNothingReadable) {
  write("cpu/cpu.cfs_quota_us", "-1\n");
  write("cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cpuBudget(4, "3:cpu:/\n", root_.string()).cpus, 4u);
  EXPECT_EQ(cpuBudget(4, "", (root_ / "missing").string()).cpus, 4u);
}

TEST(CpuBudget, CurrentIsAtLeastOne) {
  auto b = currentCpuBudget();
  EXPECT_GE(b.cpus, 1u);
  EXPECT_FALSE(b.why.empty());
}

}  // namespace
}  // namespace sandgate::proxy
