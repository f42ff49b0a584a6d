// Tests of run/run_limits.cc: config + flags into sandbox::Options, and how the limits are said.
#include "run/run_limits.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace sandgate::run {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(ApplySandboxSettings, DefaultsAreMarkedAsDefaults) {
  sandbox::Options o;
  ASSERT_EQ(applySandboxSettings(config::Sandbox{}, RunRequest{}, &o), "");
  EXPECT_EQ(o.memoryBytes, 4 * kGiB);
  EXPECT_EQ(o.pids, 1024u);
  EXPECT_FALSE(o.cpus.has_value());
  EXPECT_EQ(o.timeout, milliseconds(7200 * 1000));
  EXPECT_EQ(o.tmpfsBytes, kGiB);
  EXPECT_EQ(o.idRangeFirst, 0x7E000000u);
  EXPECT_EQ(o.idRangeCount, 65536u);
  // Not enforceable here means a warning, not a refusal.
  EXPECT_TRUE(o.memoryIsDefault);
  EXPECT_TRUE(o.pidsIsDefault);
  EXPECT_TRUE(o.cpusIsDefault);
  EXPECT_TRUE(static_cast<bool>(o.onLimits));
}

TEST(ApplySandboxSettings, ConfigValuesAreDefaultsToo) {
  config::Sandbox sb;
  sb.memoryBytes = 64 * kMiB;
  sb.cpus = 2;
  sb.timeout.reset();
  sb.readOnlyPaths = {"/opt/a"};
  sb.idRangeFirst = 100000;
  sb.idRangeCount = 10;
  sandbox::Options o;
  ASSERT_EQ(applySandboxSettings(sb, RunRequest{}, &o), "");
  EXPECT_EQ(o.memoryBytes, 64 * kMiB);
  EXPECT_EQ(o.cpus, 2.0);
  EXPECT_FALSE(o.timeout.has_value());
  EXPECT_EQ(o.readOnlyPaths, std::vector<std::string>{"/opt/a"});
  EXPECT_EQ(o.idRangeFirst, 100000u);
  EXPECT_EQ(o.idRangeCount, 10u);
  EXPECT_TRUE(o.memoryIsDefault && o.cpusIsDefault && o.pidsIsDefault);
}

TEST(ApplySandboxSettings, FlagsWinAndAreRequests) {
  RunRequest req;
  req.memory = "unlimited";
  req.pids = "50";
  req.cpus = "0.5";
  req.timeout = "90s";
  req.tmpfsSize = "256M";
  req.readOnly = {"/opt/a/", "/srv//b"};
  config::Sandbox sb;
  sb.readOnlyPaths = {"/opt/a"};
  sandbox::Options o;
  ASSERT_EQ(applySandboxSettings(sb, req, &o), "");
  EXPECT_FALSE(o.memoryBytes.has_value());
  EXPECT_EQ(o.pids, 50u);
  EXPECT_EQ(o.cpus, 0.5);
  EXPECT_EQ(o.timeout, milliseconds(90000));
  EXPECT_EQ(o.tmpfsBytes, 256 * kMiB);
  EXPECT_EQ(o.readOnlyPaths, (std::vector<std::string>{"/opt/a", "/srv/b"}));  // no duplicate
  EXPECT_FALSE(o.memoryIsDefault);
  EXPECT_FALSE(o.pidsIsDefault);
  EXPECT_FALSE(o.cpusIsDefault);
}

TEST(ApplySandboxSettings, DiskDefaultFromTheConfigAndTheFlagOverIt) {
  config::Sandbox sb;
  sandbox::Options o;
  ASSERT_EQ(applySandboxSettings(sb, RunRequest{}, &o), "");
  EXPECT_FALSE(o.diskBytes.has_value());  // built-in default: unlimited
  sb.diskBytes = 64 * kMiB;
  ASSERT_EQ(applySandboxSettings(sb, RunRequest{}, &o), "");
  EXPECT_EQ(o.diskBytes, 64 * kMiB);
  RunRequest req;
  req.disk = "1M";
  ASSERT_EQ(applySandboxSettings(sb, req, &o), "");
  EXPECT_EQ(o.diskBytes, kMiB);
  req.disk = "unlimited";
  ASSERT_EQ(applySandboxSettings(sb, req, &o), "");
  EXPECT_FALSE(o.diskBytes.has_value());
  // Bind mode has no upper layer: the config's default does not apply, the flag is refused.
  RunRequest bind;
  bind.workspaceMode = "bind";
  ASSERT_EQ(applySandboxSettings(sb, bind, &o), "");
  EXPECT_FALSE(o.diskBytes.has_value());
  bind.disk = "1M";
  EXPECT_NE(applySandboxSettings(sb, bind, &o).find("needs --workspace-mode overlay"),
            std::string::npos);
  sb.workspaceMode = "bind";
  ASSERT_EQ(applySandboxSettings(sb, RunRequest{}, &o), "");
  EXPECT_FALSE(o.diskBytes.has_value());
}

TEST(ApplySandboxSettings, UsageErrors) {
  struct Case {
    const char* name;
    RunRequest req;
    const char* want;
  };
  auto with = [](auto field, const char* value) {
    RunRequest r;
    r.*field = value;
    return r;
  };
  RunRequest ro;
  ro.readOnly = {"/"};
  const Case cases[] = {
      {"memory", with(&RunRequest::memory, "lots"), "--memory lots: expected a size"},
      {"memory zero", with(&RunRequest::memory, "0"), "--memory 0: expected"},
      {"pids", with(&RunRequest::pids, "0"), "--pids 0: expected an integer from 1"},
      {"cpus", with(&RunRequest::cpus, "-1"), "--cpus -1: expected a number of cores"},
      {"timeout", with(&RunRequest::timeout, "0"), "--timeout 0: expected a duration"},
      {"tmpfs unlimited", with(&RunRequest::tmpfsSize, "unlimited"), "cannot be unlimited"},
      {"ro root", ro, "--ro /: / cannot be read-only"},
      {"disk", with(&RunRequest::disk, "0"), "--disk 0: expected a size such as 512M"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    sandbox::Options o;
    auto e = applySandboxSettings(config::Sandbox{}, c.req, &o);
    EXPECT_NE(e.find(c.want), std::string::npos) << e;
  }
}

TEST(Format, SizesAndDurations) {
  EXPECT_EQ(formatSize(4 * kGiB), "4G");
  EXPECT_EQ(formatSize(1536 * kMiB), "1536M");
  EXPECT_EQ(formatSize(64 * 1024), "64K");
  EXPECT_EQ(formatSize(1000), "1000B");
  EXPECT_EQ(formatDuration(milliseconds(7200000)), "2h");
  EXPECT_EQ(formatDuration(milliseconds(5400000)), "1h30m");
  EXPECT_EQ(formatDuration(milliseconds(90000)), "1m30s");
  EXPECT_EQ(formatDuration(milliseconds(250)), "250ms");
  EXPECT_EQ(formatDuration(milliseconds(0)), "0s");
}

TEST(DescribeLimits, SaysWhatIsNotEnforced) {
  RunLimits l{4 * kGiB, 1024, std::nullopt, milliseconds(7200000), kGiB};
  EXPECT_EQ(describeLimits(l, {}),
            "memory 4G, pids 1024, cpus unlimited, timeout 2h, tmpfs 1G each (/tmp /run /dev/shm)");
  l.cpus = 1.5;
  EXPECT_EQ(describeLimits(l, {"memory: no controller", "cpu: cannot write cpu.max"}),
            "memory 4G (NOT ENFORCED), pids 1024, cpus 1.5 (NOT ENFORCED), timeout 2h, tmpfs 1G "
            "each (/tmp /run /dev/shm)");
  // An entry names its controller before the colon: "pidsx: ..." is not about pids.
  EXPECT_FALSE(isUnenforced({"pidsx: y"}, "pids"));
  EXPECT_TRUE(isUnenforced({"pids: y"}, "pids"));
}

TEST(LimitsToJson, NullForUnlimitedAndEnforcedPerLimit) {
  RunLimits l{64 * kMiB, std::nullopt, 2.0, milliseconds(1500), kGiB};
  auto j = boost::json::serialize(limitsToJson(l, {"memory: nope"}));
  EXPECT_EQ(j, R"({"memory_bytes":67108864,"pids":null,"cpus":2,"timeout_seconds":1.5E0,)"
               R"("tmpfs_bytes":1073741824,"enforced":{"memory":false,"pids":null,"cpus":true,)"
               R"("timeout":true,"tmpfs":true}})");
  l.timeout = milliseconds(7200000);
  EXPECT_EQ(limitsToJson(l, {}).at("timeout_seconds").as_int64(), 7200);
}

}  // namespace
}  // namespace sandgate::run
